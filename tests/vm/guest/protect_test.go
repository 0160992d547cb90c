package guest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// privateTmps are the directories PID 1 made for unit's PrivateTmp (in /tmp and /var/tmp).
func privateTmps(t *testing.T, unit string) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"/tmp", "/var/tmp"} {
		m, err := filepath.Glob(filepath.Join(dir, "systemd-private-*-"+unit+"-*"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// TestProtectSystemThroughPID1: the node plugin with --mount-s3-protect-system against PID 1, in
// the chart's layout (credentials on /run's tmpfs, caches in /var/cache). The mount-s3 of a
// publish with a cache runs in a mount namespace of its own with each property in effect
// (harness.CheckProtected: the node's file systems, the kubelet and state directories
// read-only but for its cache, its own /tmp, a /dev without disks or /dev/fuse, no /root, a
// read-only /proc/sys) and the confinement of every mount unit (no capability, no_new_privs,
// seccomp, its own user); PID 1 made its private /tmp below the node's; data goes through the
// target both ways; its log reaches the unit's journal through the /dev/log of its private /dev.
// mount-s3 SIGKILLed: the node plugin repairs the mount by itself (the dead staging mount
// unmounted in PID 1's namespace by scality-fuse-helper) and the new mount-s3 is protected the
// same way. Unpublish leaves no mount, no active unit, no private /tmp, no credentials.
func TestProtectSystemThroughPID1(t *testing.T) {
	const bucket = "vm-protected"
	node := harness.NewProtectedNode(t)
	s3 := harness.StartS3(t)
	s3.CreateBucket(t, bucket)
	kubelet := node.KubeletDir
	harness.CleanupMounts(t, kubelet)
	drv := harness.StartDriver(t, harness.DriverOptions{
		KubeletDir: kubelet, SystemdSocket: pid1Socket, S3: s3, WithCredentials: true,
		ExtraArgs: append([]string{"--mount-timeout=120s", "--systemd-credentials-dir=" + chartCredentialsDir, "--systemd-cache-dir=" + chartCacheDir}, node.Args...),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s", drv.Log())
		}
	})
	target := harness.TargetPath(t, kubelet, "pod-protected", "pv-protected")
	req := publishRequest(target, bucket, "vol-"+bucket)
	req.VolumeCapability.GetMount().MountFlags = []string{"cache"}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	body := []byte("written through a protected unit of PID 1\n")
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), body, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got := s3.GetObject(t, bucket, "hello.txt"); !bytes.Equal(got, body) {
		t.Fatalf("object hello.txt = %q, want %q", got, body)
	}
	unit := systemd.MountUnitName(target)
	p := &pid1{t: t}
	stateDir := filepath.Join(kubelet, "plugins", "s3.csi.scality.com", "systemd")
	check := func(pid int) {
		t.Helper()
		harness.CheckProtected(t, pid, 1, kubelet, stateDir, chartCredentialsDir)
		checkConfined(t, pid)
		if tmps := privateTmps(t, unit); len(tmps) == 0 {
			t.Errorf("PID 1 made no private /tmp for %s", unit)
		}
	}
	pid := p.mainPID(unit)
	if pid == 0 {
		t.Fatalf("%s has no main PID", unit)
	}
	check(pid)
	if j := journal(t, "-u", unit, "-t", "mount-s3"); !strings.Contains(j, bucket) {
		t.Errorf("journalctl -u %s -t mount-s3 has no line of mount-s3 about its bucket:\n%s", unit, j)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid = p.waitRepaired(t, unit, target, pid)
	if got, err := os.ReadFile(filepath.Join(target, "hello.txt")); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after the repair: %q, %v", got, err)
	}
	writeAndCheck(t, s3, bucket, target, "after-repair.txt")
	check(pid)

	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if m := harness.MountsBelow(kubelet); len(m) != 0 {
		t.Errorf("still mounted after unpublish: %v", m)
	}
	if st := p.activeState(unit); st != "" && st != "inactive" {
		t.Errorf("%s is %s after unpublish", unit, st)
	}
	waitFor(t, 30*time.Second, "the unit's private /tmp to go", func() bool { return len(privateTmps(t, unit)) == 0 })
	id := strings.TrimSuffix(strings.TrimPrefix(unit, "mount-s3-"), ".service")
	for _, dir := range []string{filepath.Join(chartCredentialsDir, id), filepath.Join(chartCacheDir, id)} {
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is left after unpublish (%v)", dir, err)
		}
	}
}
