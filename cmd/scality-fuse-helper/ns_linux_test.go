package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary run as a child (childEnv set) mounts a tmpfs at the directory named there, or
// unmounts it, first entering its parent's mount namespace when enterEnv is set: what the helper
// does as a "+" command of a unit with a mount namespace of its own.
const (
	childEnv = "S3CSI_HELPER_NS_CHILD"
	enterEnv = "S3CSI_HELPER_NS_ENTER"
	opEnv    = "S3CSI_HELPER_NS_OP"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(nsChild(dir))
	}
	os.Exit(m.Run())
}

func nsChild(dir string) int {
	if os.Getenv(enterEnv) == "1" {
		if err := enterManagerNamespace(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	var err error
	if os.Getenv(opEnv) == "umount" {
		err = unmountStale(dir)
	} else {
		err = unix.Mount("nschild", dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "size=64k")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child runs the test binary as a child, in a mount namespace of its own when ownNS (a private
// copy of this one, as systemd gives a unit with ProtectSystem), and fails the test unless it
// succeeds.
func child(t *testing.T, dir string, ownNS, enter bool, op string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, opEnv+"="+op)
	if enter {
		cmd.Env = append(cmd.Env, enterEnv+"=1")
	}
	if ownNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child (own namespace %v, enter %v, %s): %v: %s", ownNS, enter, op, err, out)
	}
}

func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	return len(stack(t, dir))
}

// A child in a mount namespace of its own that enters its parent's makes its mount where the
// parent sees it, and unmounts it there; without entering, its mount stays in its namespace; in
// the parent's namespace already, entering changes nothing.
func TestEnterManagerNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to mount (make test runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "staging")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for mountsAt(t, dir) > 0 {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("clean up %s: %v", dir, err)
				return
			}
		}
	})

	child(t, dir, true, false, "mount")
	if n := mountsAt(t, dir); n != 0 {
		t.Fatalf("a mount made in the child's own namespace is seen by its parent (%d mounts): the control does not separate them", n)
	}
	child(t, dir, true, true, "mount")
	if n := mountsAt(t, dir); n != 1 {
		t.Fatalf("after entering its parent's namespace, the child's mount is seen %d times by the parent, want 1", n)
	}
	child(t, dir, true, true, "umount")
	if n := mountsAt(t, dir); n != 0 {
		t.Fatalf("after entering its parent's namespace, the child's unmount left %d mounts", n)
	}
	child(t, dir, false, true, "mount")
	if n := mountsAt(t, dir); n != 1 {
		t.Fatalf("a child in its parent's namespace: %d mounts, want 1", n)
	}
}
