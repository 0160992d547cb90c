package mounttable

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// mountForTest mounts and unmounts at the test's end (lazily, so that a failing test leaves
// nothing busy behind).
func mountForTest(t *testing.T, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		t.Fatalf("mount %s at %s: %v", fstype, target, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

func stackAt(entries []Entry, path string) []Entry {
	var s []Entry
	for _, e := range entries {
		if e.MountPoint == path {
			s = append(s, e)
		}
	}
	return s
}

// TestAtAgreesWithTheTable: what At says is mounted at a path is what the table says, field by
// field: for stacked mounts with different flags, a bind mount of a subdirectory made read-only
// on its own, a mount point with a space in its name (escaped in the table, not by statmount),
// and for every mount point of this machine's table (proc, sysfs, cgroups, overlays, FUSE,
// whatever is there: each entry At gives is one the table lists at that point). A directory, a
// missing path and a link to a mount point hold nothing.
func TestAtAgreesWithTheTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to mount (make test runs as root)")
	}
	if _, known := (Table{}).At("/proc"); !known {
		t.Fatal("At cannot tell on this kernel (statmount with the source needs Linux 6.13): this test needs one that can")
	}
	dir := t.TempDir()
	a, b, c, plain := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c d"), filepath.Join(dir, "plain")
	for _, p := range []string{a, b, c, plain} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mountForTest(t, "s3csi-at-lower", a, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755")
	if err := os.Mkdir(filepath.Join(a, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	mountForTest(t, filepath.Join(a, "sub"), b, "", unix.MS_BIND, "")
	mountForTest(t, "", b, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOEXEC, "")
	mountForTest(t, "s3csi-at-upper", a, "tmpfs", unix.MS_RDONLY|unix.MS_NOEXEC|unix.MS_NOATIME|unix.MS_SYNCHRONOUS, "size=2m")
	mountForTest(t, "s3csi at spaced", c, "tmpfs", unix.MS_STRICTATIME, "")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}

	all, err := Table{}.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		n    int
	}{{a, 2}, {b, 1}, {c, 1}, {plain, 0}, {filepath.Join(dir, "missing"), 0}, {link, 0}} {
		got, known := Table{}.At(tc.path)
		want := stackAt(all, tc.path)
		if !known || len(got) != tc.n || !reflect.DeepEqual(got, want) && tc.n > 0 {
			t.Errorf("At(%q) = %+v, %v\nwant %d entries, as the table: %+v", tc.path, got, known, tc.n, want)
		}
	}
	if got, _ := (Table{}).At(b); len(got) == 1 && (got[0].Root != "/sub" || got[0].MountOptions[:3] != "ro," || got[0].SuperOptions[:3] != "rw,") {
		t.Errorf("the read-only bind of a subdirectory: %+v", got[0])
	}

	points := map[string]bool{}
	for _, e := range all {
		points[e.MountPoint] = true
	}
	delete(points, "/") // its parent may lie outside this process's root
	for p := range points {
		got, known := Table{}.At(p)
		if !known {
			t.Errorf("At(%q) cannot tell", p)
			continue
		}
		if len(got) == 0 {
			t.Errorf("At(%q): nothing, the table lists %d mounts there", p, len(stackAt(all, p)))
		}
		for _, e := range got {
			if !containsEntry(stackAt(all, p), e) {
				t.Errorf("At(%q) gives %+v, which the table does not list there: %+v", p, e, stackAt(all, p))
			}
		}
	}
	if _, known := (Table{Path: "/tmp/mountinfo"}).At("/proc"); known {
		t.Error("a table read from a file of its own claimed to know what is mounted")
	}
}

func containsEntry(list []Entry, e Entry) bool {
	for _, l := range list {
		if l == e {
			return true
		}
	}
	return false
}
