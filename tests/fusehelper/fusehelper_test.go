// Package fusehelper tests scality-fuse-helper, the binary systemd mode's units run, against a
// socket playing systemd's notification socket: the FUSE mount it hands over, and what it leaves
// when the hand-over fails.
package fusehelper

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// mountedAt returns the mountinfo line of the mount at dir ("" if none).
func mountedAt(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return line
		}
	}
	return ""
}

// helper runs scality-fuse-helper mount with args, NOTIFY_SOCKET set to sock.
func helper(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(harness.Bin(t, "scality-fuse-helper"), append([]string{"mount", "--timeout=5s"}, args...)...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUndoesItsMountWhenTheHandOverFails: without a manager to take the descriptor, the helper
// fails and leaves nothing mounted.
func TestUndoesItsMountWhenTheHandOverFails(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	out, err := helper(t, "", dir)
	if err == nil || !strings.Contains(out, "NOTIFY_SOCKET is not set") {
		t.Fatalf("helper without a manager: %v: %s", err, out)
	}
	if line := mountedAt(t, dir); line != "" {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		t.Errorf("a failed hand-over left a mount: %s", line)
	}
}

// TestHandsOverAPrivateReadOnlyMount: with a manager, the FUSE mount stays, private and
// read-only as asked, and the manager received a /dev/fuse descriptor.
func TestHandsOverAPrivateReadOnlyMount(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "notify")
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		for {
			buf, oob := make([]byte, 256), make([]byte, 64)
			n, oobn, _, _, err := unix.Recvmsg(s, buf, oob, 0)
			if err != nil {
				return
			}
			cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, c := range cmsgs {
				fds, _ := unix.ParseUnixRights(&c)
				for _, fd := range fds {
					if strings.HasPrefix(string(buf[:n]), "FDSTORE=1") {
						got <- fd
					} else {
						unix.Close(fd) // the barrier's pipe: processed
					}
				}
			}
		}
	}()
	if out, err := helper(t, sock, "--read-only", "--allow-other", dir); err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	fd := <-got
	defer unix.Close(fd)
	if link, err := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(fd))); err != nil || link != "/dev/fuse" {
		t.Errorf("the stored descriptor is %q (%v), want /dev/fuse", link, err)
	}
	line := mountedAt(t, dir)
	if line == "" {
		t.Fatal("no mount left for mount-s3 to serve")
	}
	f := strings.Fields(line)
	opts, rest := f[5], strings.Join(f[6:], " ")
	if !strings.Contains(","+opts+",", ",ro,") || strings.Contains(rest, "shared:") || !strings.Contains(line, "allow_other") || !strings.Contains(line, " fuse ") {
		t.Errorf("mount %q: want a private, read-only FUSE mount with allow_other", line)
	}
}

// TestBindsTwiceOntoTheTarget: `bind` (the units' ExecStartPost) stacks two binds of the
// staging mount on the target, read-only with the staging mount's nosuid and nodev when asked;
// a call without both paths is refused before anything is mounted.
func TestBindsTwiceOntoTheTarget(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	for _, d := range []string{staging, target} {
		harness.Must(t, os.Mkdir(d, 0o700))
	}
	harness.Must(t, unix.Mount("staged", staging, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, "size=64k"))
	defer func() {
		for _, p := range []string{target, target, staging} {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}()
	harness.Must(t, unix.Mount("", staging, "", unix.MS_PRIVATE, ""))

	bin := harness.Bin(t, "scality-fuse-helper")
	out, err := exec.Command(bin, "bind", staging).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "a staging directory and a target expected") {
		t.Fatalf("bind with one path: %v: %s", err, out)
	}
	if out, err := exec.Command(bin, "bind", "--read-only", staging, target).CombinedOutput(); err != nil {
		t.Fatalf("bind: %v: %s", err, out)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	harness.Must(t, err)
	binds := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != target {
			continue
		}
		binds++
		for _, want := range []string{"ro", "nosuid", "nodev"} {
			if !strings.Contains(","+f[5]+",", ","+want+",") {
				t.Errorf("bind %q: want %s", line, want)
			}
		}
	}
	if binds != 2 {
		t.Errorf("%d mounts at the target, want 2", binds)
	}
}
