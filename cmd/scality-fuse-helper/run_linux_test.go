package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// stack returns the mount options of the mounts at path, bottom first.
func stack(t *testing.T, path string) []string {
	t.Helper()
	entries, err := mounttable.Table{}.List()
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, e := range entries {
		if e.MountPoint == path {
			opts = append(opts, e.MountOptions)
		}
	}
	return opts
}

// staged mounts a tmpfs with the per-mount flags of a FUSE mount of fusemount.Mount at a private
// staging directory, and returns it with an empty target beside it.
func staged(t *testing.T) (staging, target string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to mount (make test runs as root)")
	}
	dir := t.TempDir()
	staging, target = filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	for _, d := range []string{staging, target} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("staged", staging, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{target, target, staging} {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	if err := unix.Mount("", staging, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	return staging, target
}

// A read-write volume gets two binds of the staging mount, with its nosuid and nodev; a
// read-only one two read-only binds that keep them too (a remount of a bind with MS_RDONLY alone
// drops them), and a write through it fails.
func TestBindTwice(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		staging, target := staged(t)
		if err := bindTwice(staging, target, readOnly); err != nil {
			t.Fatalf("read-only %v: %v", readOnly, err)
		}
		got := stack(t, target)
		if len(got) != 2 {
			t.Fatalf("read-only %v: %d mounts at the target (%v), want 2", readOnly, len(got), got)
		}
		for _, o := range got {
			opts := strings.Split(o, ",")
			want := []string{"rw", "nosuid", "nodev", "noatime"}
			if readOnly {
				want[0] = "ro"
			}
			for _, w := range want {
				if !slices.Contains(opts, w) {
					t.Errorf("read-only %v: a bind has options %q, want %v among them", readOnly, o, want)
				}
			}
		}
		err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o600)
		if readOnly && !errors.Is(err, syscall.EROFS) {
			t.Errorf("write through a read-only bind: %v, want EROFS", err)
		}
		if !readOnly && err != nil {
			t.Errorf("write through a read-write bind: %v", err)
		}
	}
}

// A target that is a link is refused and nothing is mounted where it leads.
func TestBindTwiceRefusesALink(t *testing.T) {
	staging, target := staged(t)
	link := filepath.Join(filepath.Dir(target), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	err := bindTwice(staging, link, false)
	if err == nil || !strings.Contains(err.Error(), "no link followed") {
		t.Fatalf("bind onto a link: %v, want a refusal", err)
	}
	if got := stack(t, target); len(got) != 0 {
		t.Fatalf("mounted through the link: %v", got)
	}
}

// A failure after the first bind unmounts what was made.
func TestBindTwiceUndoes(t *testing.T) {
	staging, target := staged(t)
	calls := 0
	sysMount = func(source, at, fstype string, flags uintptr, data string) error {
		if calls++; calls == 2 {
			return unix.EBUSY
		}
		return unix.Mount(source, at, fstype, flags, data)
	}
	t.Cleanup(func() { sysMount = unix.Mount })
	err := bindTwice(staging, target, false)
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("second bind failing: %v, want its error", err)
	}
	if calls != 2 {
		t.Fatalf("%d binds tried, want 2", calls)
	}
	if got := stack(t, target); len(got) != 0 {
		t.Fatalf("left mounted after the failure: %v", got)
	}
}
