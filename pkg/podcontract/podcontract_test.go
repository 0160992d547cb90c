package podcontract

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

func TestKeyStringIsUnambiguous(t *testing.T) {
	a := Key{NodeName: "n", PVName: "a;b", VolumeID: "c"}
	b := Key{NodeName: "n", PVName: "a", VolumeID: "b;c"}
	if a.String() == b.String() {
		t.Fatalf("keys %+v and %+v render the same: %s", a, b, a.String())
	}
	if AttachmentName(a) == AttachmentName(b) {
		t.Fatal("different keys get one attachment name")
	}
	// Deterministic: an equal key built anew gets the same name.
	if again := (Key{NodeName: "n", PVName: "a;b", VolumeID: "c"}); AttachmentName(again) != AttachmentName(a) {
		t.Fatal("attachment names are not a function of the key")
	}
	if n := AttachmentName(a); len(n) > 63 || !strings.HasPrefix(n, "s3pa-") {
		t.Errorf("attachment name %q", n)
	}
}

func TestMountpointPodName(t *testing.T) {
	sum := sha256.Sum224([]byte("uid-1" + "pv-1"))
	if got, want := MountpointPodName("uid-1", "pv-1"), "mp-"+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("name = %s, want %s", got, want)
	}
}

func TestLabelValue(t *testing.T) {
	for v, want := range map[string]string{
		"pv-1": "pv-1", "v1.2.3": "v1.2.3", "": "", "-bad": "", "bad-": "", strings.Repeat("a", 64): "", "a/b": "",
	} {
		if got := LabelValue(v); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", v, got, want)
		}
	}
	if VersionLabel("not valid!") != "invalid-version" {
		t.Error("invalid version not sanitised")
	}
}

func TestMountpointPodOf(t *testing.T) {
	atts := []crdv2.MountpointS3PodAttachment{
		{Spec: crdv2.MountpointS3PodAttachmentSpec{NodeName: "n1", PersistentVolumeName: "pv", VolumeID: "vol",
			MountpointS3PodAttachments: map[string][]crdv2.WorkloadAttachment{"mp-other-node": {{WorkloadPodUID: "w"}}}}},
		{Spec: crdv2.MountpointS3PodAttachmentSpec{NodeName: "n2", PersistentVolumeName: "pv", VolumeID: "other-vol",
			MountpointS3PodAttachments: map[string][]crdv2.WorkloadAttachment{"mp-other-vol": {{WorkloadPodUID: "w"}}}}},
		{Spec: crdv2.MountpointS3PodAttachmentSpec{NodeName: "n2", PersistentVolumeName: "pv", VolumeID: "vol",
			MountpointS3PodAttachments: map[string][]crdv2.WorkloadAttachment{
				"mp-a": {{WorkloadPodUID: "x"}},
				"mp-b": {{WorkloadPodUID: "y"}, {WorkloadPodUID: "w"}},
			}}},
	}
	for _, tc := range []struct{ node, uid, pv, vol, want string }{
		{"n2", "w", "pv", "vol", "mp-b"},
		{"n2", "x", "pv", "vol", "mp-a"},
		{"n1", "w", "pv", "vol", "mp-other-node"},
		{"n2", "w", "pv", "other-vol", "mp-other-vol"},
		{"n2", "w", "other-pv", "vol", ""},
		{"n3", "w", "pv", "vol", ""},
		{"n2", "z", "pv", "vol", ""},
	} {
		if got := MountpointPodOf(atts, tc.node, tc.uid, tc.pv, tc.vol); got != tc.want {
			t.Errorf("MountpointPodOf(%s, %s, %s, %s) = %q, want %q", tc.node, tc.uid, tc.pv, tc.vol, got, tc.want)
		}
	}
}

func TestAttachmentIndexes(t *testing.T) {
	a := &crdv2.MountpointS3PodAttachment{Spec: crdv2.MountpointS3PodAttachmentSpec{
		NodeName: "n", PersistentVolumeName: "pv", VolumeID: "vol", MountOptions: "ro", WorkloadFSGroup: "7", AuthenticationSource: "driver",
		MountpointS3PodAttachments: map[string][]crdv2.WorkloadAttachment{"mp-a": {{WorkloadPodUID: "u1"}, {WorkloadPodUID: "u2"}}},
	}}
	want := map[string][]string{
		IndexNodeName: {"n"}, IndexPVName: {"pv"}, IndexVolumeID: {"vol"}, IndexMountOptions: {"ro"}, IndexFSGroup: {"7"},
		IndexAuthSource: {"driver"}, IndexKey: {KeyOf(a).String()}, IndexWorkloadUID: {"u1", "u2"}, IndexMountpointPod: {"mp-a"},
	}
	if len(attachmentIndexes) != len(want) {
		t.Fatalf("%d indexes, the test knows %d", len(attachmentIndexes), len(want))
	}
	for name, fn := range attachmentIndexes {
		if got := fn(a); strings.Join(got, ",") != strings.Join(want[name], ",") {
			t.Errorf("index %s = %v, want %v", name, got, want[name])
		}
	}
	if k := KeyOf(a); k != (Key{NodeName: "n", PVName: "pv", VolumeID: "vol", MountOptions: "ro", FSGroup: "7", AuthSource: "driver"}) {
		t.Errorf("KeyOf = %+v", k)
	}
}

func TestCommHostPath(t *testing.T) {
	if got, want := CommHostPath("/var/lib/kubelet", "uid-1"), "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/comm"; got != want {
		t.Errorf("CommHostPath = %s, want %s", got, want)
	}
}
func TestStripMountpointPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mp", Namespace: "mount-s3", Labels: map[string]string{"l": "v"},
			Annotations: map[string]string{AnnotationNeedsUnmount: "true"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec: corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "mountpoint"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: "Ready"},
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient memory."}}},
	}
	out, _ := StripMountpointPod(pod)
	p := out.(*corev1.Pod)
	if p.Spec.NodeName != "node" || p.Status.Phase != corev1.PodRunning || p.Labels["l"] != "v" || p.Annotations[AnnotationNeedsUnmount] != "true" {
		t.Errorf("lost a field the reconciler reads: %+v", p)
	}
	if why, stuck := Unschedulable(p); !stuck || why != "Unschedulable: 0/1 nodes are available: 1 Insufficient memory." {
		t.Errorf("the scheduling condition was lost: %q %v", why, stuck)
	}
	if len(p.Spec.Containers) != 0 || len(p.Status.Conditions) != 1 || p.ManagedFields != nil {
		t.Errorf("kept fields the reconciler never reads: %+v", p)
	}
	if pod.Spec.Containers == nil || pod.ManagedFields == nil {
		t.Error("StripMountpointPod modified its input")
	}
}

func TestParseExtraMetadata(t *testing.T) {
	m, err := ParseExtraMetadata("--mountpoint-labels", `{"team":"storage","example.com/tier":"gold"}`, true)
	if err != nil || m["team"] != "storage" || m["example.com/tier"] != "gold" {
		t.Errorf("labels = %v, %v", m, err)
	}
	if m, err := ParseExtraMetadata("--mountpoint-labels", "", true); m != nil || err != nil {
		t.Errorf("empty = %v, %v; want none", m, err)
	}
	long := strings.Repeat("v", 300<<10)
	for _, tc := range []struct {
		value  string
		labels bool
		want   string
	}{
		{`["team"]`, true, "--mountpoint-labels: want a JSON object of strings"},
		{`{"team":5}`, true, "--mountpoint-labels: want a JSON object of strings"},
		{`{"bad key!":"x"}`, true, `--mountpoint-labels: key "bad key!"`},
		{`{"team":"not a label value"}`, true, `--mountpoint-labels: value of "team"`},
		{`{"s3.csi.scality.com/volume-name":"x"}`, true, `key "s3.csi.scality.com/volume-name" is the driver's own`},
		{`{"app.kubernetes.io/component":"x"}`, true, `key "app.kubernetes.io/component" is the driver's own`},
		{`{"s3.csi.scality.com/needs-unmount":"true"}`, false, `--mountpoint-annotations: key "s3.csi.scality.com/needs-unmount" is the driver's own`},
		{`{"big":"` + long + `"}`, false, "bytes of annotations, at most 262144"},
	} {
		flag := "--mountpoint-annotations"
		if tc.labels {
			flag = "--mountpoint-labels"
		}
		if _, err := ParseExtraMetadata(flag, tc.value, tc.labels); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60s: error %v, want one saying %q", tc.value, err, tc.want)
		}
	}
	// An annotation value is free text (not a label value), and app.kubernetes.io/component is
	// only the driver's as a label.
	if _, err := ParseExtraMetadata("--mountpoint-annotations", `{"note":"any text, even this","app.kubernetes.io/component":"x"}`, false); err != nil {
		t.Errorf("annotations refused: %v", err)
	}
}

func TestUnschedulable(t *testing.T) {
	pod := func(c ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: c}}
	}
	if _, stuck := Unschedulable(pod()); stuck {
		t.Error("a pod without conditions is not stuck")
	}
	if _, stuck := Unschedulable(pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})); stuck {
		t.Error("a scheduled pod is not stuck")
	}
	if _, stuck := Unschedulable(pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated"})); stuck {
		t.Error("a gated pod is not unschedulable")
	}
	if why, stuck := Unschedulable(pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "taint"})); !stuck || why != "Unschedulable: taint" {
		t.Errorf("Unschedulable = %q, %v", why, stuck)
	}
}
