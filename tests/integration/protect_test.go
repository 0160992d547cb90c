package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// newProtectedSuite is newSuite with --mount-s3-protect-system, with the kubelet, credentials and
// cache directories and the binaries the units run outside /tmp (which such a unit sees empty;
// the node plugin refuses them there): in a directory of /var/lib made for the test.
func newProtectedSuite(t *testing.T) *suite {
	t.Helper()
	harness.RequireRoot(t)
	base, err := os.MkdirTemp("/var/lib", "s3csi-protect-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := harness.MountsBelow(base); len(m) > 0 {
			t.Errorf("not removing %s: still mounted: %v", base, m)
			return
		}
		_ = os.RemoveAll(base)
	})
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"mount-s3": harness.MountS3(t), "scality-fuse-helper": harness.Bin(t, "scality-fuse-helper")} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &suite{t: t, s3: harness.StartS3(t), kubelet: harness.NewKubeletDirIn(t, base)}
	s.sd = harness.StartSystemd(t, s.kubelet)
	harness.CleanupMounts(t, s.kubelet)
	s.drv = harness.StartDriver(t, harness.DriverOptions{
		KubeletDir: s.kubelet, SystemdSocket: s.sd.Socket, S3: s.s3, WithCredentials: true,
		ExtraArgs: []string{"--mount-s3-protect-system", "--mount-s3-path=" + filepath.Join(bin, "mount-s3"), "--fuse-helper-path=" + filepath.Join(bin, "scality-fuse-helper")},
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s\nsystemd log:\n%s", tailLog(s.drv.Log()), tailLog(s.sd.Log()))
		}
	})
	return s
}

// nsOf is the mount namespace of process pid ("mnt:[inode]").
func nsOf(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		t.Fatalf("mount namespace of %d: %v", pid, err)
	}
	return ns
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
	checkProtected(t, s, pid)

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
	checkProtected(t, s, s.mainPID(target))
	s.unpublish(target)
	s.assertClean(target)
}

func checkProtected(t *testing.T, s *suite, pid int) {
	t.Helper()
	if own, manager := nsOf(t, pid), nsOf(t, s.sd.PID()); own == manager {
		t.Fatalf("mount-s3 runs in the manager's mount namespace %s", own)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	// ProtectSystem=strict: a root-owned directory of the node, the kubelet directory and the
	// mount's state directory refuse a write, to root too; the cache takes one.
	for _, dir := range []string{"/usr", "/etc", s.kubelet, s.stateDir()} {
		err := os.WriteFile(filepath.Join(root, dir, "s3csi-protect-probe"), []byte("x"), 0o600)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("a write in %s in mount-s3's namespace: %v, want EROFS", dir, err)
			_ = os.Remove(filepath.Join(dir, "s3csi-protect-probe"))
		}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	var cache string
	for _, a := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(a, "--cache="); ok {
			cache = v
		}
	}
	if cache == "" {
		t.Fatalf("mount-s3 runs without a cache: %q", cmdline)
	}
	probe := filepath.Join(root, cache, "s3csi-protect-probe")
	if err := os.WriteFile(probe, []byte("x"), 0o600); err != nil {
		t.Errorf("a write in the cache %s in mount-s3's namespace: %v", cache, err)
	}
	_ = os.Remove(probe)
	// PrivateTmp: a file of the node's /tmp is not in mount-s3's, and one made in its /tmp is not
	// in the node's.
	host, err := os.CreateTemp("/tmp", "s3csi-node-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	host.Close()
	defer os.Remove(host.Name())
	if _, err := os.Stat(filepath.Join(root, host.Name())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node's %s in mount-s3's /tmp: %v, want none", host.Name(), err)
	}
	if err := os.WriteFile(filepath.Join(root, "/tmp/s3csi-unit-tmp"), []byte("x"), 0o600); err != nil {
		t.Errorf("mount-s3's /tmp takes no file: %v", err)
	}
	if _, err := os.Stat("/tmp/s3csi-unit-tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file of mount-s3's /tmp in the node's: %v", err)
		_ = os.Remove("/tmp/s3csi-unit-tmp")
	}
	// PrivateDevices: the node has /dev/fuse, mount-s3's /dev has neither it nor a disk; it has
	// /dev/null.
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("the node has no /dev/fuse: %v", err)
	}
	devs, err := os.ReadDir(filepath.Join(root, "/dev"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name())
		if d.Name() == "fuse" || strings.HasPrefix(d.Name(), "vd") || strings.HasPrefix(d.Name(), "sd") || strings.HasPrefix(d.Name(), "nvme") || d.Name() == "mem" || d.Name() == "kmsg" {
			t.Errorf("mount-s3's /dev has %s", d.Name())
		}
	}
	if !strings.Contains(" "+strings.Join(names, " ")+" ", " null ") {
		t.Errorf("mount-s3's /dev lacks null: %v", names)
	}
	// ProtectHome: the node's /root has files, mount-s3's is an empty directory without
	// permissions (which only this test's CAP_DAC_OVERRIDE may list).
	if home, err := os.ReadDir("/root"); err != nil || len(home) == 0 {
		t.Fatalf("the node's /root: %d entries, %v (the check needs some)", len(home), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "/root")); err != nil || fi.Mode().Perm() != 0 {
		t.Errorf("mount-s3's /root: %v, %v, want mode 0", fi, err)
	}
	if home, err := os.ReadDir(filepath.Join(root, "/root")); err == nil && len(home) != 0 {
		t.Errorf("mount-s3's /root lists %d entries of the node's", len(home))
	}
	// ProtectKernelTunables: /proc/sys refuses a write (the value it holds, so that nothing
	// changes if it did not).
	const tunable = "/proc/sys/vm/swappiness"
	v, err := os.ReadFile(tunable)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, tunable), v, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write of %s in mount-s3's namespace: %v, want EROFS", tunable, err)
	}
}
