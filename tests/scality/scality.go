// Package scality reproduces the releases of Scality's S3 CSI driver that this driver's users
// run (chart scality-mountpoint-s3-csi-driver 1.0.0-1.2.0 in systemd mode, 2.0.0-2.2.0 in pod
// mode), for the tests of upgrades from them: their chart's objects (chart/, assembled per
// release by Chart) and the facts of their node plugins and controller the stand-ins follow
// (this file; SOURCES.md gives the source of each, repository@tag:path). Nothing here is
// Scality's code: it is written from a reading of theirs at each tag, and checked against it
// by tests/tools/scalitycompare where a copy of their repository is at hand.
package scality

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// Release is one of Scality's releases: its tag, which is also its packaged chart's version,
// appVersion and image tag.
type Release string

// The releases users run (docs/upgrade.md).
const (
	R100 Release = "1.0.0"
	R110 Release = "1.1.0"
	R111 Release = "1.1.1"
	R120 Release = "1.2.0"
	R200 Release = "2.0.0"
	R211 Release = "2.1.1"
	R220 Release = "2.2.0"
)

// Releases lists them in order.
var Releases = []Release{R100, R110, R111, R120, R200, R211, R220}

// Family is "1.x" (systemd mode) or "2.x" (pod mode).
func (r Release) Family() string {
	if strings.HasPrefix(string(r), "1.") {
		return "1.x"
	}
	return "2.x"
}

// PodMode reports whether the release mounts in pod mode (2.x) rather than systemd mode (1.x).
func (r Release) PodMode() bool { return r.Family() == "2.x" }

func (r Release) atLeast(o Release) bool {
	return slices.Index(Releases, r) >= slices.Index(Releases, o)
}

// SocketFileMounted reports whether the release differs here: 1.0.0 and 1.1.0 mount systemd's
// private socket file into the node plugin (hostPath /run/systemd/private, type Socket); 1.1.1 and
// 1.2.0 the directory /run/systemd. Every 1.x tag dials unix:path=/run/systemd/private (SOURCES.md
// §1.x systemd).
func (r Release) SocketFileMounted() bool { return !r.PodMode() && !r.atLeast(R111) }

// Reconnects reports whether the release differs here: from 1.1.1 the node plugin redials systemd
// once after a lost connection.
func (r Release) Reconnects() bool { return !r.PodMode() && r.atLeast(R111) }

// ForcePathStyle reports whether the release differs here: from 1.1.0 every mount gets
// --force-path-style; 1.0.0 passes the PV's options only.
func (r Release) ForcePathStyle() bool { return r.atLeast(R110) }

// Controller reports whether the release differs here: the chart has the controller Deployment
// s3-csi-controller (1.2.0 with controller.enable, its default; every 2.x).
func (r Release) Controller() bool { return r.atLeast(R120) }

// GlobalS3Values reports whether the release differs here: the endpoint and region are
// s3.endpointUrl and s3.region (1.2.0 on; the node.s3* values still win when set), not
// node.s3EndpointUrl and node.s3Region.
func (r Release) GlobalS3Values() bool { return r.atLeast(R120) }

// TLS reports whether the release differs here: 2.2.0's tls.* values (a CA ConfigMap its Mountpoint
// Pods' init container reads).
func (r Release) TLS() bool { return r.atLeast(R220) }

// MountpointPodFSGroup reports whether the release differs here: 2.x Mountpoint Pods get
// securityContext.fsGroup 1000 from 2.1.1 (none in 2.0.0).
func (r Release) MountpointPodFSGroup() bool { return r.atLeast(R211) }

// DriverCredentialFilesReadable reports whether the release differs here: the Mountpoint Pod's
// mount-s3 (uid 1000) can read the driver-level credential files the 2.x node plugin writes into
// its comm directory (root-owned, 0640, in a 0750 directory): only with the pod's fsGroup, from
// 2.1.1. A 2.0.0 mount with the driver's credentials fails ("failed to get shared config profile",
// seen on the rig); 2.0.0's working mounts use a volume's Secret (environment variables, no file).
func (r Release) DriverCredentialFilesReadable() bool { return r.MountpointPodFSGroup() }

// secretKey2x, secretSecret2x: the keys 2.x's node plugin accepts from a volume's Secret
// (access_key_id, secret_access_key): 2.0.0 1-16 alphanumerics and 1-40 of [A-Za-z0-9/+=];
// from 2.1.1 1-128 of each, "-" allowed in the secret
// (scality/mountpoint-s3-csi-driver@2.0.0,2.1.1:pkg/driver/node/credentialprovider/
// provider_secret.go, provideFromSecret).
var (
	secretKey200    = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)
	secretSecret200 = regexp.MustCompile(`^[A-Za-z0-9/+=]{1,40}$`)
	secretKey211    = regexp.MustCompile(`^[A-Za-z0-9]{1,128}$`)
	secretSecret211 = regexp.MustCompile(`^[A-Za-z0-9/+\-=]{1,128}$`)
)

// SecretKeysAccepted reports whether the release's node plugin takes these keys from a
// volume's Secret (it trims them first). 1.x's are 2.0.0's.
func (r Release) SecretKeysAccepted(accessKey, secretKey string) bool {
	a, s := strings.TrimSpace(accessKey), strings.TrimSpace(secretKey)
	if r.atLeast(R211) {
		return secretKey211.MatchString(a) && secretSecret211.MatchString(s)
	}
	return secretKey200.MatchString(a) && secretSecret200.MatchString(s)
}

// AttachmentLabelled reports whether the release differs here: 2.2.0 labels its attachments with
// the driver version.
func (r Release) AttachmentLabelled() bool { return r.atLeast(R220) }

// StartupTaint reports whether the release differs here: 2.2.0's node plugin removes the taint
// s3.csi.scality.com/agent-not-ready once kubelet lists the driver, and its DaemonSet tolerates it.
func (r Release) StartupTaint() bool { return r.atLeast(R220) }

// DriverVersion is the version the release's binaries report and label their Mountpoint
// Pods and attachments with: the Makefile's VERSION, which at tag 2.2.0 still says 2.1.1 (the
// published image's value is unread).
func (r Release) DriverVersion() string {
	if r == R220 {
		return "2.1.1"
	}
	return string(r)
}

// MountpointVersion is the mount-s3 version the image ships (1.18.0 at every tag) and the
// 1.x units are named after: mount-s3-<MountpointVersion>-<uuid>.service.
const MountpointVersion = "1.18.0"

// Names of the objects every release makes, which an upgrade meets.
const (
	ChartName           = "scality-mountpoint-s3-csi-driver"
	NodeServiceAccount  = "s3-csi-driver-sa"
	CtrlServiceAccount  = "s3-csi-driver-controller-sa"
	NodeClusterRole     = "s3-csi-driver-cluster-role"
	NodeBinding         = "mountpoint-s3-csi-node-binding"
	CtrlClusterRole     = "s3-csi-driver-controller-cluster-role"
	CtrlBinding         = "s3-csi-driver-controller-cluster-role-binding"
	MountpointNamespace = "mount-s3"
	CredentialSecret    = "s3-secret"
	// Image is the driver image's repository; its tag is the release.
	Image = "ghcr.io/scality/mountpoint-s3-csi-driver"
)

// MountpointPodLabels are the labels of a 2.x Mountpoint Pod, exactly four: the mount-s3
// version (empty: the chart renders MOUNTPOINT_VERSION from node.mountpointVersion, which its
// values do not set), the first workload's UID, the PV, and the driver version. No app, no
// app.kubernetes.io/* (SOURCES.md §2.x Mountpoint Pod).
func MountpointPodLabels(r Release, workloadUID, pv string) map[string]string {
	return map[string]string{
		"s3.csi.scality.com/mountpoint-version":            "",
		"s3.csi.scality.com/pod-uid":                       workloadUID,
		"s3.csi.scality.com/volume-name":                   pv,
		"s3.csi.scality.com/mounted-by-csi-driver-version": r.DriverVersion(),
	}
}

// PriorityClasses 2.x makes, with their values.
var PriorityClasses = map[string]int32{"mount-s3-critical": 1_000_000_000, "mount-s3-preempting": 999_999_999, "mount-s3-headroom": -10}

// dir is this package's directory.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Chart assembles the release's chart in a new directory under parent, as Scality's release
// workflow packages it: Chart.yaml with version and appVersion the tag, the tag's values.yaml,
// the templates, and from 2.0.0 the CRD in crds/ (which Helm installs once and never owns).
func Chart(parent string, r Release) (string, error) {
	src := filepath.Join(dir(), "chart")
	out := filepath.Join(parent, ChartName+"-"+string(r))
	if err := os.CopyFS(filepath.Join(out, "templates"), os.DirFS(filepath.Join(src, "templates"))); err != nil {
		return "", err
	}
	meta, err := os.ReadFile(filepath.Join(src, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	meta = []byte(strings.Replace(string(meta), "version: 0.0.0", fmt.Sprintf("version: %s\nappVersion: %q", r, r), 1))
	if err := os.WriteFile(filepath.Join(out, "Chart.yaml"), meta, 0o644); err != nil {
		return "", err
	}
	values, err := os.ReadFile(filepath.Join(src, "values", string(r)+".yaml"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, "values.yaml"), values, 0o644); err != nil {
		return "", err
	}
	if r.PodMode() {
		if err := os.CopyFS(filepath.Join(out, "crds"), os.DirFS(filepath.Join(src, "crds-2x"))); err != nil {
			return "", err
		}
	}
	return out, nil
}

// UserValues are the values a typical user of the release sets: the RING endpoint and region
// (node.s3EndpointUrl and node.s3Region before 1.2.0, s3.* from it) and the driver's
// credentials Secret (s3CredentialSecret.name), as Scality's install guides have them.
func UserValues(r Release, endpoint, region, secret string) map[string]any {
	v := map[string]any{"s3CredentialSecret": map[string]any{"name": secret}}
	if r.GlobalS3Values() {
		v["s3"] = map[string]any{"endpointUrl": endpoint, "region": region}
	} else {
		v["node"] = map[string]any{"s3EndpointUrl": endpoint, "s3Region": region}
	}
	return v
}

// Merge returns a's values with b's over them (maps merged key by key, anything else
// replaced), as Helm merges values files; a and b are left as they are.
func Merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = Merge(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
