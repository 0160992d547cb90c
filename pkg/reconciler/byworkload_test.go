package reconciler

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

func attachmentRecording(name string, byPod map[string][]string) *crdv2.MountpointS3PodAttachment {
	a := &crdv2.MountpointS3PodAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	a.Spec.MountpointS3PodAttachments = map[string][]crdv2.WorkloadAttachment{}
	for mp, uids := range byPod {
		for _, u := range uids {
			a.Spec.MountpointS3PodAttachments[mp] = append(a.Spec.MountpointS3PodAttachments[mp], crdv2.WorkloadAttachment{WorkloadPodUID: u})
		}
	}
	return a
}

func TestWorkloadAttachments(t *testing.T) {
	x := newWorkloadAttachments()
	h := x.handler()
	want := func(uid string, names ...string) {
		t.Helper()
		got := x.names(uid)
		slices.Sort(got)
		if !slices.Equal(got, names) {
			t.Errorf("names(%s) = %v, want %v", uid, got, names)
		}
	}
	a1 := attachmentRecording("a1", map[string][]string{"mp1": {"u1", "u2"}, "mp2": {"u3"}})
	h.OnAdd(a1, false)
	want("u1", "a1")
	want("u3", "a1")
	// A workload in two attachments (a duplicate, or Scality 2.x's beside ours).
	a2 := attachmentRecording("a2", map[string][]string{"mp9": {"u1"}})
	h.OnAdd(a2, false)
	want("u1", "a1", "a2")
	// u2 leaves a1, u4 joins.
	a1b := attachmentRecording("a1", map[string][]string{"mp1": {"u1", "u4"}, "mp2": {"u3"}})
	h.OnUpdate(a1, a1b)
	want("u2")
	want("u4", "a1")
	want("u1", "a1", "a2")
	// A deletion the informer saw only as a final state unknown.
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a1", Obj: a1b})
	want("u1", "a2")
	want("u3")
	want("u4")
	h.OnDelete(a2)
	if len(x.byUID) != 0 {
		t.Errorf("entries left after every attachment went: %v", x.byUID)
	}
}
