package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// newProtectedSuite is newSuite with --mount-s3-protect-system, with the kubelet, credentials and
// cache directories and the binaries the units run outside /tmp (harness.NewProtectedNode).
func newProtectedSuite(t *testing.T) *suite {
	t.Helper()
	harness.RequireRoot(t)
	node := harness.NewProtectedNode(t)
	s := &suite{t: t, s3: harness.StartS3(t), kubelet: node.KubeletDir}
	s.sd = harness.StartSystemd(t, s.kubelet)
	harness.CleanupMounts(t, s.kubelet)
	s.drv = harness.StartDriver(t, harness.DriverOptions{
		KubeletDir: s.kubelet, SystemdSocket: s.sd.Socket, S3: s.s3, WithCredentials: true, ExtraArgs: node.Args,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s\nsystemd log:\n%s", tailLog(s.drv.Log()), tailLog(s.sd.Log()))
		}
	})
	return s
}

// TestUnitsProtectSystem: with --mount-s3-protect-system the mount-s3 of a publish runs in a
// mount namespace of its own, and each property of it is in effect there, seen through
// /proc/<pid>/root (paths walked in mount-s3's own namespace, as root with every capability):
// the node's file systems refuse a write (ProtectSystem=strict) but for the mount's cache,
// where mount-s3 writes; /tmp is not the node's (PrivateTmp); /dev holds no disk and no
// /dev/fuse (PrivateDevices); /root is out of reach (ProtectHome); /proc/sys refuses a write
// (ProtectKernelTunables). The FUSE mount and its binds are the manager's (scality-fuse-helper
// --in-manager-namespace): data goes through the target both ways, a killed mount-s3 is
// repaired (its stale staging mount unmounted in the manager's namespace), and the unpublish
// leaves nothing.
func TestUnitsProtectSystem(t *testing.T) {
	s := newProtectedSuite(t)
	s.s3.CreateBucket(t, "protected")
	target := s.target("pod-a")
	s.publish(rw(target, "protected", "allow-delete", "cache"))
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through a protected mount-s3: %v", err)
	}
	if got := s.s3.GetObject(t, "protected", "hello.txt"); string(got) != "hi" {
		t.Errorf("object = %q", got)
	}
	pid := s.mainPID(target)
	if pid == 0 {
		t.Fatal("mount unit has no main PID")
	}
	harness.CheckProtected(t, pid, s.sd.PID(), s.kubelet, s.stateDir())

	// A kill: the repair unmounts the dead staging mount and mounts again, both in the manager's
	// namespace, and the new mount-s3 is protected too.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.publish(rw(target, "protected", "allow-delete", "cache")) // kubelet's republish repairs it
	waitFor(t, 30*time.Second, "a new mount-s3", func() bool { p := s.mainPID(target); return p != 0 && p != pid })
	if got, err := os.ReadFile(filepath.Join(target, "hello.txt")); err != nil || string(got) != "hi" {
		t.Fatalf("read after the repair: %q, %v", got, err)
	}
	harness.CheckProtected(t, s.mainPID(target), s.sd.PID(), s.kubelet, s.stateDir())
	s.unpublish(target)
	s.assertClean(target)
}
