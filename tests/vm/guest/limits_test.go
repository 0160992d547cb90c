package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// spinEnv makes the test binary spin on the CPU until killed (TestMain).
const spinEnv = "S3CSI_VM_SPIN"

func spin() {
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
		_ = x
	}
}

// cpuStat reads usage_usec and nr_throttled of a cgroup's cpu.stat.
func cpuStat(t *testing.T, cg string) (usage, throttled uint64) {
	t.Helper()
	for _, line := range strings.Split(readFile(t, filepath.Join("/sys/fs/cgroup", cg, "cpu.stat")), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "usage_usec":
			usage = v
		case "nr_throttled":
			throttled = v
		}
	}
	return usage, throttled
}

// TestCPULimitThroughPID1: a volume's mountpointCPULimit and mountpointCPURequest become its
// mount-s3 unit's cpu.max and cpu.weight under PID 1, and the kernel holds the unit to its
// limit: a process spinning in the unit's cgroup beside mount-s3 (standing for a busy mount-s3)
// gets at most about the limit's CPU time and is throttled, while the mount keeps serving. The
// figure is logged; the bound checked is loose (1.5 times the limit over 5 s), as the guest's
// clock runs under emulation.
func TestCPULimitThroughPID1(t *testing.T) {
	const bucket = "vm-cpu"
	s3, kubelet, drv := startNode(t, bucket)
	target := harness.TargetPath(t, kubelet, "pod-cpu", "pv-cpu")
	req := publishRequest(target, bucket, "vol-vm-cpu")
	req.VolumeContext[mountresources.AttrCPULimit] = "200m"
	req.VolumeContext[mountresources.AttrCPURequest] = "100m"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	m := &pid1{t: t}
	unit := systemd.MountUnitName(target)
	cg := unitProp(t, m.conn(), unit, "ControlGroup")
	if got := strings.TrimSpace(readFile(t, filepath.Join("/sys/fs/cgroup", cg, "cpu.max"))); got != "20000 100000" {
		t.Errorf("%s cpu.max = %q, want \"20000 100000\" (200m)", unit, got)
	}
	// kubelet's shares for 100m (102) as a cgroup v2 weight.
	if got := strings.TrimSpace(readFile(t, filepath.Join("/sys/fs/cgroup", cg, "cpu.weight"))); got != "4" {
		t.Errorf("%s cpu.weight = %q, want 4 (100m)", unit, got)
	}

	self, err := os.Executable()
	harness.Must(t, err)
	spinner := exec.Command(self)
	spinner.Env = []string{spinEnv + "=1"}
	harness.Must(t, spinner.Start())
	ended := make(chan struct{})
	go func() { _ = spinner.Wait(); close(ended) }()
	t.Cleanup(func() { _ = spinner.Process.Kill(); <-ended })
	harness.Must(t, os.WriteFile(filepath.Join("/sys/fs/cgroup", cg, "cgroup.procs"), []byte(strconv.Itoa(spinner.Process.Pid)), 0o644))

	time.Sleep(time.Second)
	u0, th0 := cpuStat(t, cg)
	w0 := time.Now()
	time.Sleep(5 * time.Second)
	u1, th1 := cpuStat(t, cg)
	wall := time.Since(w0)
	share := float64(u1-u0) / float64(wall.Microseconds())
	t.Logf("unit %s with a spinner: %.3f CPU over %v (limit 0.200), throttled %d times", unit, share, wall.Round(time.Millisecond), th1-th0)
	if share > 0.3 {
		t.Errorf("the unit used %.3f CPU under a 200m limit: cpu.max not enforced", share)
	}
	if th1 == th0 {
		t.Errorf("the unit was never throttled while spinning")
	}
	if err := harness.StatfsWithin(target, 10*time.Second); err != nil {
		t.Errorf("the mount stopped serving while its unit was at its CPU limit: %v", err)
	}
	writeAndCheck(t, s3, bucket, target, "while-busy")

	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	// The unit's stop ends every process of its cgroup, the spinner too.
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Errorf("the process in the unit's cgroup survived the unpublish")
	}
}
