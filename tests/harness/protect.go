package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ProtectedNode is what a node plugin with --mount-s3-protect-system needs on a test machine:
// its kubelet directory (with the credentials and cache directories beside it) and the binaries
// its mount units run, outside /tmp and /var/tmp, which such a unit sees empty (and which the
// node plugin refuses for them): in a directory of /var/lib made for the test, removed after it.
type ProtectedNode struct {
	KubeletDir string
	// Args are the node plugin's flags: the protection, and mount-s3 and scality-fuse-helper at
	// their copies.
	Args []string
}

// NewProtectedNode makes a ProtectedNode.
func NewProtectedNode(t testing.TB) ProtectedNode {
	t.Helper()
	base, err := os.MkdirTemp("/var/lib", "s3csi-protect-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := MountsBelow(base); len(m) > 0 {
			t.Errorf("not removing %s: still mounted: %v", base, m)
			return
		}
		_ = os.RemoveAll(base)
	})
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"mount-s3": MountS3(t), "scality-fuse-helper": Bin(t, "scality-fuse-helper")} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ProtectedNode{
		KubeletDir: NewKubeletDirIn(t, base),
		Args:       []string{"--mount-s3-protect-system", "--mount-s3-path=" + filepath.Join(bin, "mount-s3"), "--fuse-helper-path=" + filepath.Join(bin, "scality-fuse-helper")},
	}
}

// nsOf is the mount namespace of process pid ("mnt:[inode]").
func nsOf(t testing.TB, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		t.Fatalf("mount namespace of %d: %v", pid, err)
	}
	return ns
}

// CheckProtected fails t unless the mount-s3 of process pid runs in a mount namespace of its own
// (not that of the manager managerPID) in which each property of --mount-s3-protect-system is in
// effect, seen through /proc/<pid>/root (paths walked in mount-s3's own namespace, as this root
// with every capability): /usr, /etc, /run, /var/lib and readOnly (the kubelet and state
// directories, say) refuse a write (ProtectSystem=strict) while its cache (its --cache) takes one;
// /tmp is not the node's (PrivateTmp); /dev holds neither /dev/fuse nor a disk (PrivateDevices);
// /root is an empty directory without permissions (ProtectHome); /proc/sys refuses a write
// (ProtectKernelTunables).
func CheckProtected(t testing.TB, pid, managerPID int, readOnly ...string) {
	t.Helper()
	if own, manager := nsOf(t, pid), nsOf(t, managerPID); own == manager {
		t.Fatalf("mount-s3 runs in the manager's mount namespace %s", own)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	// ProtectSystem=strict: a root-owned directory of the node, the kubelet directory and the
	// mount's state directory refuse a write, to root too; the cache takes one.
	for _, dir := range append([]string{"/usr", "/etc", "/run", "/var/lib"}, readOnly...) {
		err := os.WriteFile(filepath.Join(root, dir, "s3csi-protect-probe"), []byte("x"), 0o600)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("a write in %s in mount-s3's namespace: %v, want EROFS; mount-s3's mounts there:\n%s", dir, err, mountsOver(pid, dir))
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
	// ProtectHome: a file put in the node's /root is not in mount-s3's, an empty directory
	// without permissions (which only this test's CAP_DAC_OVERRIDE may list).
	home, err := os.CreateTemp("/root", "s3csi-protect-probe-")
	if err != nil {
		t.Fatal(err)
	}
	home.Close()
	defer os.Remove(home.Name())
	if _, err := os.Lstat(filepath.Join(root, home.Name())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node's %s in mount-s3's namespace: %v, want none", home.Name(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "/root")); err != nil || fi.Mode().Perm() != 0 {
		t.Errorf("mount-s3's /root: %v, %v, want a directory of mode 0", fi, err)
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

// mountsOver are the lines of process pid's mountinfo whose mount point is dir or one of its
// parents.
func mountsOver(pid int, dir string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == "/" || dir == f[4] || strings.HasPrefix(dir, f[4]+"/")) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
