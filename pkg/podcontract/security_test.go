package podcontract

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseSecurityContext(t *testing.T) {
	const flag = "--mountpoint-security-context"
	if sc, err := ParseSecurityContext(flag, " "); sc != nil || err != nil {
		t.Errorf("empty: %v %v", sc, err)
	}
	good := `{"seLinuxOptions":{"type":"container_t","level":"s0:c1,c2"},"seccompProfile":{"type":"Localhost","localhostProfile":"profiles/mount-s3.json"},"appArmorProfile":{"type":"RuntimeDefault"},"supplementalGroups":[2000]}`
	sc, err := ParseSecurityContext(flag, good)
	if err != nil {
		t.Fatal(err)
	}
	spec := corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{FSGroup: new(int64), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers:      []corev1.Container{{SecurityContext: &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}},
	}
	sc.Apply(&spec)
	psc := spec.SecurityContext
	if psc.SELinuxOptions.Type != "container_t" || psc.SELinuxOptions.Level != "s0:c1,c2" || psc.FSGroup == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *psc.SeccompProfile.LocalhostProfile != "profiles/mount-s3.json" ||
		psc.AppArmorProfile.Type != corev1.AppArmorProfileTypeRuntimeDefault || len(psc.SupplementalGroups) != 1 {
		t.Errorf("pod security context %+v", psc)
	}
	if c := spec.Containers[0].SecurityContext.SeccompProfile; c.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("the container's seccomp profile %+v would override the pod's", c)
	}
	(*SecurityContext)(nil).Apply(&spec) // nothing to add

	for _, tc := range []struct{ value, want string }{
		{`{"runAsUser":0}`, `field "runAsUser" cannot be set: the Mountpoint Pods run as user, group and fsGroup 1000`},
		{`{"fsGroup":2000}`, `field "fsGroup" cannot be set`},
		{`{"privileged":true}`, `field "privileged" cannot be set`},
		{`{"seLinuxOptions":{"type":"spc_t"}}`, `seLinuxOptions.type "spc_t" is not allowed by the restricted Pod Security level`},
		{`{"seLinuxOptions":{"user":"system_u"}}`, `field "user" cannot be set`},
		{`{"seccompProfile":{"type":"Unconfined"}}`, `seccompProfile must be {"type":"RuntimeDefault"} or`},
		{`{"seccompProfile":{"type":"Localhost","localhostProfile":"/etc/x.json"}}`, `seccompProfile must be`},
		{`{"appArmorProfile":{"type":"Localhost","localhostProfile":"../x"}}`, `appArmorProfile must be`},
		{`{"supplementalGroups":[-1]}`, `supplementalGroups: -1 is not a group ID`},
		{`[1]`, `not a JSON security context`},
	} {
		_, err := ParseSecurityContext(flag, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), flag+": ") {
			t.Errorf("%s: %v, want %q", tc.value, err, tc.want)
		}
	}
}
