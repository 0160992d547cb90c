package podcontract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// SecurityContext is what an operator may add to every Mountpoint Pod's security context
// (--mountpoint-security-context, Helm mountpointPod.securityContext), within the restricted
// Pod Security level and without touching what the fd hand-over needs: the user, group and
// fsGroup are the driver's (MountpointUID: the node plugin writes the credentials for that
// group and hands the FUSE connection to that user), and so are the dropped capabilities, the
// read-only root filesystem and the ban on privilege escalation.
type SecurityContext struct {
	// SELinuxOptions label the pod's processes (restricted: type container_t, container_init_t
	// or container_kvm_t; level free; no user or role).
	SELinuxOptions *SELinuxOptions `json:"seLinuxOptions,omitempty"`
	// SeccompProfile replaces RuntimeDefault with a profile on the node (Localhost).
	SeccompProfile *Profile `json:"seccompProfile,omitempty"`
	// AppArmorProfile confines the pod (RuntimeDefault or Localhost).
	AppArmorProfile *Profile `json:"appArmorProfile,omitempty"`
	// SupplementalGroups are added to the pod's processes.
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`
}

// SELinuxOptions is the part of corev1.SELinuxOptions the restricted level allows.
type SELinuxOptions struct {
	Type  string `json:"type,omitempty"`
	Level string `json:"level,omitempty"`
}

// Profile is a seccomp or AppArmor profile: RuntimeDefault, or Localhost with the profile's
// path on the node.
type Profile struct {
	Type             string `json:"type"`
	LocalhostProfile string `json:"localhostProfile,omitempty"`
}

// restrictedSELinuxTypes are the SELinux types the restricted level allows.
var restrictedSELinuxTypes = []string{"container_t", "container_init_t", "container_kvm_t"}

// ParseSecurityContext parses the JSON value of flag ("" is none) strictly and checks it: an
// unknown field (runAsUser, runAsGroup, fsGroup, privileged, capabilities, ...) is refused with
// what the driver needs instead, as is anything the restricted level forbids. Errors name flag.
func ParseSecurityContext(flag, value string) (*SecurityContext, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var sc SecurityContext
	if err := dec.Decode(&sc); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fmt.Errorf("%s: field %s cannot be set: the Mountpoint Pods run as user, group and fsGroup %d (the node plugin writes their credentials for that group and hands the FUSE connection to that user), non-root, with every capability dropped and a read-only root filesystem; seLinuxOptions, seccompProfile, appArmorProfile and supplementalGroups can be set", flag, f, MountpointUID)
		}
		return nil, fmt.Errorf("%s: not a JSON security context: %v", flag, err)
	}
	if o := sc.SELinuxOptions; o != nil && o.Type != "" && !slices.Contains(restrictedSELinuxTypes, o.Type) {
		return nil, fmt.Errorf("%s: seLinuxOptions.type %q is not allowed by the restricted Pod Security level; use %s", flag, o.Type, strings.Join(restrictedSELinuxTypes, ", "))
	}
	for _, np := range []struct {
		name string
		p    *Profile
	}{{"seccompProfile", sc.SeccompProfile}, {"appArmorProfile", sc.AppArmorProfile}} {
		name, p := np.name, np.p
		if p == nil {
			continue
		}
		switch {
		case p.Type == "RuntimeDefault" && p.LocalhostProfile == "":
		case p.Type == "Localhost" && p.LocalhostProfile != "" && !strings.HasPrefix(p.LocalhostProfile, "/") && !strings.Contains(p.LocalhostProfile, ".."):
		default:
			return nil, fmt.Errorf("%s: %s must be {\"type\":\"RuntimeDefault\"} or {\"type\":\"Localhost\",\"localhostProfile\":\"<relative path on the node>\"} (the restricted Pod Security level allows nothing else)", flag, name)
		}
	}
	for _, g := range sc.SupplementalGroups {
		if g < 0 || g > 1<<31-1 {
			return nil, fmt.Errorf("%s: supplementalGroups: %d is not a group ID", flag, g)
		}
	}
	return &sc, nil
}

// Apply sets sc on a Mountpoint Pod's spec: the pod's security context, and the seccomp profile
// of its containers too (theirs would override the pod's). A nil sc changes nothing.
func (sc *SecurityContext) Apply(spec *corev1.PodSpec) {
	if sc == nil {
		return
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := spec.SecurityContext
	if o := sc.SELinuxOptions; o != nil {
		psc.SELinuxOptions = &corev1.SELinuxOptions{Type: o.Type, Level: o.Level}
	}
	if p := sc.SeccompProfile; p != nil {
		prof := &corev1.SeccompProfile{Type: corev1.SeccompProfileType(p.Type)}
		if p.LocalhostProfile != "" {
			prof.LocalhostProfile = &p.LocalhostProfile
		}
		psc.SeccompProfile = prof
		for i := range spec.Containers {
			if c := spec.Containers[i].SecurityContext; c != nil {
				c.SeccompProfile = prof.DeepCopy()
			}
		}
	}
	if p := sc.AppArmorProfile; p != nil {
		prof := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileType(p.Type)}
		if p.LocalhostProfile != "" {
			prof.LocalhostProfile = &p.LocalhostProfile
		}
		psc.AppArmorProfile = prof
	}
	psc.SupplementalGroups = append(psc.SupplementalGroups, sc.SupplementalGroups...)
}
