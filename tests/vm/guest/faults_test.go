package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// pid1 holds a connection to PID 1 that is dialled again when it dropped (daemon-reexec
// closes every connection of the private socket).
type pid1 struct {
	t *testing.T
	c *sd.Conn
}

func (p *pid1) conn() *sd.Conn {
	p.t.Helper()
	if p.c == nil || !p.c.Connected() {
		p.c = connect(p.t)
	}
	return p.c
}

// mainPID is the unit's MainPID, 0 when it has none or cannot be read (a unit being repaired).
func (p *pid1) mainPID(unit string) int {
	prop, err := p.conn().GetServicePropertyContext(context.Background(), unit, "MainPID")
	if err != nil {
		return 0
	}
	n, _ := prop.Value.Value().(uint32)
	return int(n)
}

// activeState is the unit's ActiveState ("" when it cannot be read).
func (p *pid1) activeState(unit string) string {
	prop, err := p.conn().GetUnitPropertyContext(context.Background(), unit, "ActiveState")
	if err != nil {
		return ""
	}
	s, _ := prop.Value.Value().(string)
	return s
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Eventually(t, timeout, func() string {
		if cond() {
			return ""
		}
		return "waiting for " + what
	})
}

// waitRepaired waits for target to be served again by a mount-s3 other than old and returns
// the new one's PID.
func (p *pid1) waitRepaired(t *testing.T, unit, target string, old int) int {
	t.Helper()
	start := time.Now()
	var pid int
	waitFor(t, 4*time.Minute, "the mount to be live again with a new mount-s3", func() bool {
		pid = p.mainPID(unit)
		return pid != 0 && pid != old && harness.StatfsWithin(target, 2*time.Second) == nil
	})
	t.Logf("%s live again after %v (mount-s3 %d, was %d)", target, time.Since(start).Round(time.Millisecond), pid, old)
	return pid
}

// metric is the sum of the node plugin's samples of name carrying every label pair given.
func metric(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	return harness.ScrapeSum(t, addr, name, labels...)
}

// writeAndCheck writes a file through the mount and checks the bucket has it.
func writeAndCheck(t *testing.T, s3 *harness.S3Server, bucket, target, key string) {
	t.Helper()
	body := []byte("written in the guest: " + key + "\n")
	if err := os.WriteFile(filepath.Join(target, key), body, 0o644); err != nil {
		t.Fatalf("write %s through the mount: %v", key, err)
	}
	if got := s3.GetObject(t, bucket, key); !bytes.Equal(got, body) {
		t.Fatalf("object %s = %q, want %q", key, got, body)
	}
}

// startNode starts versitygw with bucket, a kubelet directory and the node plugin in systemd
// mode against PID 1 (its log shown when the test fails).
func startNode(t *testing.T, bucket string, extraArgs ...string) (*harness.S3Server, string, *harness.Driver) {
	t.Helper()
	s3 := harness.StartS3(t)
	s3.CreateBucket(t, bucket)
	kubelet := harness.NewKubeletDir(t)
	harness.CleanupMounts(t, kubelet)
	drv := harness.StartDriver(t, harness.DriverOptions{
		KubeletDir: kubelet, SystemdSocket: pid1Socket, S3: s3, WithCredentials: true,
		ExtraArgs: append([]string{"--mount-timeout=120s"}, extraArgs...),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s", drv.Log())
		}
	})
	return s3, kubelet, drv
}

func systemctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("systemctl", args...).CombinedOutput(); err != nil {
		t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestFaultsThroughPID1 runs one systemd-mode mount of the node plugin through PID 1's faults,
// in order, each with the mount's data checked after it:
//   - mount-s3 SIGKILLed: the node plugin notices (no kubelet call) and starts a new mount-s3;
//   - mount-s3 past its memory limit: the kernel's OOM killer ends it (the cgroup's memory.max
//     lowered below its use), PID 1 records Result=oom-kill, the node plugin repairs the mount
//     with the volume's limit again and reports the OOM kill (metric and log);
//   - daemon-reload and daemon-reexec of PID 1 while it serves: the same mount-s3 keeps serving,
//     and the node plugin, whose connection re-exec closed, still publishes and repairs;
//   - the node plugin SIGKILLed and started again: the mount serves meanwhile and the new plugin
//     repairs it;
//   - unpublish: nothing mounted, no unit active, no credential files left.
func TestFaultsThroughPID1(t *testing.T) {
	const bucket = "vm-faults"
	addr := harness.FreeLoopbackAddr(t)
	s3, kubelet, drv := startNode(t, bucket, "--metrics-address="+addr)
	m := &pid1{t: t}
	target := harness.TargetPath(t, kubelet, "pod-faults", "pv-faults")
	limit := mountresources.MinMemoryLimit
	req := publishRequest(target, bucket, "vol-vm-faults")
	req.VolumeContext[mountresources.AttrMemoryLimit] = limit.String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	unit := systemd.MountUnitName(target)
	writeAndCheck(t, s3, bucket, target, "before")
	pid := m.mainPID(unit)

	// 1. SIGKILL.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid = m.waitRepaired(t, unit, target, pid)
	writeAndCheck(t, s3, bucket, target, "after-kill")
	waitFor(t, 30*time.Second, "the repair to be counted", func() bool {
		return metric(t, addr, "s3csi_node_mount_dead_total", `mode="systemd"`) >= 1 &&
			metric(t, addr, "s3csi_node_mount_repairs_total", `mode="systemd"`, `result="succeeded"`) >= 1
	})

	// 2. Out of memory: the kernel enforces a lower memory.max at once (reclaim, then the OOM
	// killer); PID 1 is not told of the change, so the repaired unit gets the volume's limit.
	cg := unitProp(t, m.conn(), unit, "ControlGroup")
	if err := os.WriteFile(filepath.Join("/sys/fs/cgroup", cg, "memory.max"), []byte("1048576"), 0o644); err != nil {
		t.Fatalf("lower memory.max of %s: %v", cg, err)
	}
	pid = m.waitRepaired(t, unit, target, pid)
	waitFor(t, 30*time.Second, "the OOM kill to be reported", func() bool {
		return metric(t, addr, "s3csi_node_mount_oom_killed_total", `mode="systemd"`) >= 1
	})
	if log := drv.Log(); !strings.Contains(log, "OOM-killed") {
		t.Errorf("the node plugin's log does not report the OOM kill")
	}
	cg = unitProp(t, m.conn(), unit, "ControlGroup")
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", cg, "memory.max")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(limit.Value()) {
		t.Errorf("repaired unit's memory.max = %q (%v), want the volume's %d", bytes.TrimSpace(b), err, limit.Value())
	}
	writeAndCheck(t, s3, bucket, target, "after-oom")

	// 3. daemon-reload, then daemon-reexec, while the mount serves.
	systemctl(t, "daemon-reload")
	if p := m.mainPID(unit); p != pid || m.activeState(unit) != "active" {
		t.Fatalf("after daemon-reload the unit is %s with mount-s3 %d, want active with %d", m.activeState(unit), p, pid)
	}
	writeAndCheck(t, s3, bucket, target, "after-reload")
	reexec := time.Now()
	systemctl(t, "daemon-reexec")
	waitFor(t, 2*time.Minute, "PID 1 to answer after daemon-reexec", func() bool { return m.activeState(unit) != "" })
	t.Logf("PID 1 answered %v after daemon-reexec", time.Since(reexec).Round(time.Millisecond))
	if p := m.mainPID(unit); p != pid || m.activeState(unit) != "active" {
		t.Fatalf("after daemon-reexec the unit is %s with mount-s3 %d, want active with %d", m.activeState(unit), p, pid)
	}
	writeAndCheck(t, s3, bucket, target, "after-reexec")
	second := harness.TargetPath(t, kubelet, "pod-faults-2", "pv-faults")
	if _, err := drv.Node.NodePublishVolume(ctx, publishRequest(second, bucket, "vol-vm-faults")); err != nil {
		t.Fatalf("NodePublishVolume after daemon-reexec: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(second, "after-reexec")); err != nil || !strings.Contains(string(got), "after-reexec") {
		t.Errorf("the second target does not show the bucket: %q %v", got, err)
	}
	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: second}); err != nil {
		t.Fatalf("NodeUnpublishVolume after daemon-reexec: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid = m.waitRepaired(t, unit, target, pid)

	// 4. The node plugin killed: the mount is PID 1's and serves; the next plugin repairs it.
	drv.Kill()
	<-drv.Exited()
	writeAndCheck(t, s3, bucket, target, "plugin-down")
	drv.Restart()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.waitRepaired(t, unit, target, pid)
	for _, key := range []string{"before", "after-kill", "after-oom", "after-reload", "after-reexec", "plugin-down"} {
		if _, err := os.Stat(filepath.Join(target, key)); err != nil {
			t.Errorf("%s through the mount: %v", key, err)
		}
	}

	// 5. Unpublish leaves nothing.
	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	for _, p := range []string{target, second} {
		if left := harness.MountsBelow(p); len(left) != 0 {
			t.Errorf("still mounted after unpublish: %v", left)
		}
	}
	units, err := m.conn().ListUnitsByPatternsContext(ctx, nil, []string{"mount-s3-*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if u.ActiveState != "inactive" {
			t.Errorf("unit %s left %s after unpublish", u.Name, u.ActiveState)
		}
	}
	if entries, err := os.ReadDir(drv.CredentialsDir()); err == nil && len(entries) != 0 {
		t.Errorf("credential files left in %s: %v", drv.CredentialsDir(), entries)
	}
}
