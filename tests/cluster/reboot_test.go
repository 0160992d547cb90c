package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testReboot power-cycles the node (rig.Reboot: every process of the node killed at once,
// every mount gone, containerd, the systemd user manager and kubelet started again) with one
// workload mounted in each mode, and one workload deleted while the node is down. After the
// boot kubelet runs the workloads again in the pods it had: each mounts again (systemd mode: a
// new unit; pod mode: its Mountpoint Pod restarted and handed a new mount), reads what it wrote
// before and writes anew; the pod deleted meanwhile goes away (its unpublish finds no mount and
// succeeds: nothing stuck Terminating); nothing stale is left (the old units died with the
// manager, the state of each mount is the new one's); and once the workloads are deleted the
// node holds nothing.
func testReboot(t *testing.T) {
	ns := newNamespace(t, "reboot")
	bucket := "reboot-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	var pods []*corev1.Pod
	for _, mode := range []string{"systemd", "pod"} {
		setMode(t, mode)
		p := workload(t, ns, "w-"+mode, claim, podOpts{})
		waitRunning(t, 2*time.Minute, p)
		mustRun(t)(execIn(t, p, "printf 'before the reboot\\n' > /data/before-"+p.Name))
		pods = append(pods, p)
	}
	setMode(t, "systemd")
	gone := workload(t, ns, "gone", claim, podOpts{})
	waitRunning(t, 2*time.Minute, gone)
	before := currentState(t)
	if len(before.units) != 2 || len(before.mpPods) != 1 {
		t.Fatalf("want two systemd mounts and one Mountpoint Pod before the reboot: %s", before)
	}
	restarts := map[string]int32{}
	for _, p := range append(pods, gone) {
		restarts[p.Name] = containerRestarts(t, p)
	}

	start := time.Now()
	err := rig.Reboot(context.Background(), testLog{t}, func() error {
		// While the node is down (no t.Fatal here: the node must boot again): the mounts are
		// gone, and kubelet cannot finish this deletion.
		if m, err := driverMounts(); err != nil || len(m) != 0 {
			return fmt.Errorf("mounts survived the power-off: %v %v", m, err)
		}
		return env.c.Delete(context.Background(), gone)
	})
	if err != nil {
		t.Fatalf("reboot: %v", err)
	}
	t.Logf("node rebooted in %.1fs", time.Since(start).Seconds())

	// The pod deleted while the node was down finishes terminating (nothing to unmount).
	deletePods(t, gone)
	for _, p := range pods {
		harness.Eventually(t, 4*time.Minute, func() string {
			if n := containerRestarts(t, p); n <= restarts[p.Name] {
				return fmt.Sprintf("%s: container not restarted after the reboot yet (%d restarts); events: %s", p.Name, n, podEvents(p))
			}
			return ""
		})
		waitRunning(t, 4*time.Minute, p)
		out := mustRun(t)(execIn(t, p, "cat /data/before-"+p.Name+" && printf 'after the reboot\\n' > /data/after-"+p.Name))
		if !strings.Contains(out, "before the reboot") {
			t.Errorf("%s reads %q after the reboot", p.Name, out)
		}
		if got := string(env.s3.GetObject(t, bucket, "after-"+p.Name)); got != "after the reboot\n" {
			t.Errorf("%s after the reboot: object %q", p.Name, got)
		}
	}
	after := currentState(t)
	t.Logf("after the reboot: %s", after)
	if len(after.units) != 1 || len(after.stateDirs) != 1 || len(after.mpPods) != 1 || len(after.attachments) != 1 {
		t.Errorf("want exactly the systemd workload's unit and state and the pod workload's Mountpoint Pod and attachment: %s", after)
	}
	deletePods(t, pods...)
	expectClean(t)
}

// containerRestarts returns the restart count of a workload's container.
func containerRestarts(t *testing.T, p *corev1.Pod) int32 {
	t.Helper()
	var cur corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	var n int32
	for _, cs := range cur.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// testLog writes the rig's progress lines into the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
