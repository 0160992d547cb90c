package podmode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// mountS3PID returns the pid of the mount-s3 serving bucket through a Mountpoint Pod (0: none).
func mountS3PID(bucket string) int {
	if pids := harness.MountS3PIDs(bucket); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// TestDeadSharedMountRepairedWithoutKubelet: the Mountpoint Pod's mount-s3 killed (-9) leaves
// every workload of that pod on a dead mount; the node plugin notices, hands a new mount to the
// restarted Mountpoint Pod and binds every workload's target again, with no call from kubelet.
// Data written before the crash is in the bucket; new writes land.
func TestDeadSharedMountRepairedWithoutKubelet(t *testing.T) {
	n := newNode(t)
	n.s3.CreateBucket(t, "pod-heal")
	pv := n.volume("heal", "pod-heal", "ReadWriteMany", "allow-delete")
	a, b := n.workload("a", pv, nil), n.workload("b", pv, nil)
	ta, tb := n.publish(a, pv, false), n.publish(b, pv, false)
	before := []byte(strings.Repeat("before the crash ", 1000))
	harness.Must(t, os.WriteFile(filepath.Join(ta, "before"), before, 0o644))
	pid := mountS3PID("pod-heal")
	if pid == 0 {
		t.Fatal("no mount-s3 serves the bucket")
	}
	killed := time.Now()
	harness.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	for _, target := range []string{ta, tb} {
		harness.Eventually(t, 30*time.Second, func() string {
			if p := mountS3PID("pod-heal"); p == 0 || p == pid {
				return "no new mount-s3 yet"
			}
			if err := harness.StatfsWithin(target, time.Second); err != nil {
				return err.Error()
			}
			return ""
		})
	}
	t.Logf("both workloads' mounts live again %v after mount-s3 was killed, without kubelet", time.Since(killed).Round(time.Millisecond))
	if got := n.s3.GetObject(t, "pod-heal", "before"); string(got) != string(before) {
		t.Errorf("object written before the crash: %d bytes, want %d", len(got), len(before))
	}
	harness.Must(t, os.WriteFile(filepath.Join(tb, "after"), []byte("after"), 0o644))
	if got, err := os.ReadFile(filepath.Join(ta, "after")); err != nil || string(got) != "after" {
		t.Errorf("the other workload reads %q, %v", got, err)
	}
	// Kubelet's republish of a repaired target is a plain refresh.
	n.publish(a, pv, false)
	ctx := context.Background()
	if r, err := n.drv.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: pv.Spec.CSI.VolumeHandle, VolumePublishPath: ta}); err != nil || len(r.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health after the repair: %v, %v", r, err)
	}
	n.unpublish(ta)
	n.unpublish(tb)
	for _, target := range []string{ta, tb} {
		if m := harness.MountsBelow(target); len(m) != 0 {
			t.Errorf("%s still mounted: %v", target, m)
		}
	}
}

// TestDeadSharedMountRepublishAndUnpublish: with the node plugin's own monitor off, kubelet's
// republish repairs a target whose Mountpoint Pod's mount-s3 died, NodeGetVolumeStats reports
// the dead one, and an unpublish of a dead target succeeds and leaves nothing.
func TestDeadSharedMountRepublishAndUnpublish(t *testing.T) {
	n := newNode(t, "--health-check-interval=0")
	n.s3.CreateBucket(t, "pod-dead")
	pv := n.volume("dead", "pod-dead", "ReadWriteMany")
	a, b := n.workload("a", pv, nil), n.workload("b", pv, nil)
	ta, tb := n.publish(a, pv, false), n.publish(b, pv, false)
	harness.Must(t, syscall.Kill(mountS3PID("pod-dead"), syscall.SIGKILL))
	harness.Eventually(t, 10*time.Second, func() string {
		if err := harness.StatfsWithin(ta, time.Second); !errors.Is(err, syscall.ENOTCONN) {
			return fmt.Sprintf("statfs: %v, want ENOTCONN", err)
		}
		return ""
	})
	ctx := context.Background()
	if _, err := n.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: ta}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("stats of a dead mount: %v, want FailedPrecondition", err)
	}
	n.publish(a, pv, false) // repairs the shared mount and a's bind
	if err := harness.StatfsWithin(ta, 2*time.Second); err != nil {
		t.Fatalf("after the republish: %v", err)
	}
	harness.Must(t, os.WriteFile(filepath.Join(ta, "healed"), []byte("y"), 0o644))
	n.unpublish(tb) // b's bind is still the dead one
	if m := harness.MountsBelow(tb); len(m) != 0 {
		t.Errorf("dead target still mounted after unpublish: %v", m)
	}
	n.unpublish(ta)
}
