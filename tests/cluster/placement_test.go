package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testUnplaceable: a volume whose Mountpoint Pods ask for more memory than the node has
// (mountpointMemoryRequest). The real scheduler cannot place the Mountpoint Pod; the workload
// gets the controller's Warning Event naming the scheduler's reason (its owner may not read
// the mount-s3 namespace), does not run, and when it is deleted the Mountpoint Pod, which never
// ran, goes too: nothing is left Pending.
func testUnplaceable(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "unplaceable")
	bucket := "unplaceable-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "big", bucket, volumeOpts{attributes: map[string]string{"mountpointMemoryRequest": "1000Gi"}})
	w := workload(t, ns, "w", claim, podOpts{})
	var msg string
	harness.Eventually(t, time.Minute, func() string {
		for _, e := range eventsOn(t, ns, w.Name) {
			if e.Reason == "MountpointPodUnschedulable" {
				msg = e.Message
				return ""
			}
		}
		return "no MountpointPodUnschedulable event on " + w.Name + " yet: " + podEvents(w)
	})
	for _, want := range []string{"for PersistentVolume", "cannot be scheduled: Unschedulable:", "Insufficient memory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q lacks %q", msg, want)
		}
	}
	var cur corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(w), &cur))
	if cur.Status.Phase == corev1.PodRunning {
		t.Errorf("workload runs without its volume")
	}
	deletePods(t, w)
	expectClean(t)
}
