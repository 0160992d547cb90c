package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Tests of the rows of CONFORMANCE.md that the older suites in this package do not cover:
// the mount point rules and the session ACL, each on a real FUSE mount.

// TestAlreadyMounted (rows M4, M8): a directory that already is a mount point, whatever is
// mounted there, is refused before anything is mounted on top of it.
func TestAlreadyMounted(t *testing.T) {
	f := newFixture(t, "bkt-already")
	for _, under := range []string{"tmpfs", "bind"} {
		t.Run(under, func(t *testing.T) {
			dir, _ := mountDir(t)
			var err error
			if under == "tmpfs" {
				err = unix.Mount("s3csi-guard", dir, "tmpfs", unix.MS_RDONLY, "size=4k")
			} else {
				err = unix.Mount(t.TempDir(), dir, "", unix.MS_BIND, "")
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			for _, fg := range [][]string{nil, {"--foreground"}} {
				code, _, stderr := runStandin(t, f.env, f.args(dir, fg...)...)
				if code != 1 || !strings.Contains(stderr, "mount point "+dir+" is already mounted") {
					t.Errorf("mount-s3 %v on a %s mount point: exit %d, stderr %q; want 1 and 'is already mounted'", fg, under, code, stderr)
				}
			}
			if n := mountsAt(t, dir); n != 1 {
				t.Errorf("%d mounts at %s after the refusals, want the 1 of the test", n, dir)
			}
		})
	}
}

// mountsAt counts the mounts at exactly dir.
func mountsAt(t *testing.T, dir string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && unescapeOctal(f[4]) == dir {
			n++
		}
	}
	return n
}

// fuseMount mounts a FUSE connection at dir as the node plugin does in pod mode (user_id=0,
// allow_other when asked) and returns the device; the mount is removed at cleanup.
func fuseMount(t *testing.T, dir string, allowOther bool) *os.File {
	t.Helper()
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions", dev.Fd())
	if allowOther {
		data += ",allow_other"
	}
	if err := unix.Mount("mountpoint-s3", dir, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, data); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_FORCE|unix.MNT_DETACH) })
	return dev
}

// TestFdMountPointRules (rows M5-M7): with /dev/fd/N, /proc/self/fd/N must link to /dev/fuse
// opened read-write, and --read-only and --auto-unmount are refused, each with mount-s3's
// message; nothing is served then.
func TestFdMountPointRules(t *testing.T) {
	f := newFixture(t, "bkt-fdrules")
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	fuseRO, err := os.OpenFile("/dev/fuse", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fuseRO.Close()
	fuseRW, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fuseRW.Close()
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	defer pipeW.Close()
	for _, c := range []struct {
		name  string
		fd    *os.File
		extra []string
		want  string
	}{
		{"not fuse", devNull, nil, "Error: Failed to create mount point\n\nCaused by:\n    expected mount point /dev/fd/3 to be a /dev/fuse file descriptor but got /dev/null\n"},
		{"fuse read-only", fuseRO, nil, "Error: Failed to create mount point\n\nCaused by:\n    expected mount point /dev/fd/3 file descriptor to have read and write permissions but got FDPermissions(READ | EXECUTE)\n"},
		{"pipe", pipeR, nil, "expected mount point /dev/fd/3 to be a /dev/fuse device file descriptor but got Pipe("},
		{"read-only", fuseRW, []string{"--read-only"}, "Error: Mount options: --read-only are ignored with FUSE fd mount point.Mount options should be passed while performing `mount` syscall in the caller process.\n"},
		{"auto-unmount", fuseRW, []string{"--auto-unmount"}, "Mount options: --auto-unmount are ignored with FUSE fd mount point."},
		{"both", fuseRW, []string{"--auto-unmount", "--read-only"}, "Mount options: --read-only, --auto-unmount are ignored with FUSE fd mount point."},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, wait, output := startForeground(t, f.env, []*os.File{c.fd}, f.args("/dev/fd/3", c.extra...)...)
			if code := wait(); code != 1 || !strings.Contains(output(), c.want) {
				t.Errorf("exit %d, output %q; want 1 and %q", code, output(), c.want)
			}
		})
	}
}

// TestSessionACL (rows A1-A4): mount-s3 running as uid 1000 on a FUSE mount made by root (pod
// mode): without --allow-root or --allow-other only uid 1000 gets in (root is refused: EACCES);
// with --allow-root root gets in too, no one else; with --allow-other everyone the file modes
// let in. The kernel mount carries allow_other in each case, so every refusal is mount-s3's.
func TestSessionACL(t *testing.T) {
	f := newFixture(t, "bkt-acl")
	f.s3.PutObject(t, f.bucket, "f", []byte("data"))
	home := t.TempDir()
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	f.env["HOME"] = home
	for _, c := range []struct {
		flag               string
		root, owner, other bool // who may read
	}{
		{"", false, true, false},
		{"--allow-root", true, true, false},
		{"--allow-other", true, true, true},
	} {
		t.Run("acl"+c.flag, func(t *testing.T) {
			dir, _ := mountDir(t)
			openParents(t, dir)
			dev := fuseMount(t, dir, true)
			args := f.args("/dev/fd/3", "--dir-mode=755", "--file-mode=644")
			if c.flag != "" {
				args = append(args, c.flag)
			}
			_, _, output := startForegroundAs(t, f.env, &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}, []*os.File{dev}, args...)
			dev.Close() // only mount-s3 holds the connection now
			waitFor(t, "mount-s3 serving as uid 1000", func() bool {
				out, err := runAs(dir, 1000, 1000, `cat "$D/f"`)
				return err == nil && out == "data"
			})
			for _, who := range []struct {
				uid uint32
				may bool
			}{{0, c.root}, {1000, c.owner}, {2000, c.other}} {
				out, err := runAs(dir, who.uid, who.uid, `cat "$D/f"`)
				switch {
				case who.may && (err != nil || out != "data"):
					t.Errorf("uid %d reading with %q: %q, %v; want the data; mount-s3 output:\n%s", who.uid, c.flag, out, err, output())
				case !who.may && (err == nil || !strings.Contains(out, "Permission denied")):
					t.Errorf("uid %d reading with %q: %q, %v; want Permission denied", who.uid, c.flag, out, err)
				}
			}
		})
	}
}

// TestEndpointRulesRefuse (row X4): with a custom endpoint and path-style addressing (how the
// driver always runs mount-s3), transfer acceleration and dual-stack fail the mount: S3's
// endpoint rules refuse both combinations, before any request is sent.
func TestEndpointRulesRefuse(t *testing.T) {
	f := newFixture(t, "bkt-endpoint-rules")
	for _, c := range []struct{ flag, want string }{
		{"--transfer-acceleration", "ccelerate"},
		{"--dual-stack", "ual"},
	} {
		dir, _ := mountDir(t)
		code, _, stderr := runStandin(t, f.env, f.args(dir, c.flag, "--foreground")...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("mount-s3 %s with a custom endpoint: exit %d, stderr %q; want 1 and an endpoint rule naming %q", c.flag, code, stderr, c.want)
		}
		if n := mountsAt(t, dir); n != 0 {
			t.Errorf("mount-s3 %s left %d mounts at %s", c.flag, n, dir)
		}
	}
}

// TestBackgroundLogsLeaveTheUnitOutput (rows L2, D4): run as a systemd unit runs it (no
// --foreground, standard output and error on a file), mount-s3 writes only its start-up output
// there, however much it logs afterwards (--debug): its log goes to syslog. This is why the
// driver documents the unit's journal, not mount-s3.log, as where its runtime log is.
func TestBackgroundLogsLeaveTheUnitOutput(t *testing.T) {
	f := newFixture(t, "bkt-bglog")
	f.s3.PutObject(t, f.bucket, "f", []byte("data"))
	dir, pidFile := mountDir(t)
	out := filepath.Join(t.TempDir(), "mount-s3.log")
	logf, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(standinBin, f.args(dir, "--debug")...)
	cmd.Env = append(f.env.list(), "UNSTABLE_MOUNTPOINT_PID_FILE="+pidFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		t.Fatalf("mount-s3: %v", err)
	}
	pid := readPid(pidFile)
	for range 3 {
		if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "data" {
			t.Fatalf("read: %q, %v", b, err)
		}
		if _, err := os.ReadFile(filepath.Join(dir, "missing")); err == nil {
			t.Fatal("a missing object was read")
		}
	}
	unmountAndWait(t, dir, pid)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "bucket bkt-bglog is mounted at " + dir + "\n"; string(b) != want {
		t.Errorf("the unit's output holds %q, want only the start-up line %q", b, want)
	}
}

// TestCacheDirectory (row O6): with --cache, the stand-in replaces its own subdirectory of the
// cache directory with an empty one at start, removes it when the session ends, and leaves the
// rest alone; it refuses to start when it cannot make it.
func TestCacheDirectory(t *testing.T) {
	f := newFixture(t, "bkt-cache")
	cache := t.TempDir()
	mustWrite(t, filepath.Join(cache, "kept"), "the driver's")
	if err := os.MkdirAll(filepath.Join(cache, "mountpoint-cache", "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, pidFile := mountDir(t)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir, "--cache", cache)...)
	st, err := os.Stat(filepath.Join(cache, "mountpoint-cache"))
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache subdirectory: %v, %v", st, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(cache, "mountpoint-cache")); len(entries) != 0 {
		t.Errorf("an earlier run's cache survived the start: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(cache, "kept")); err != nil {
		t.Errorf("a file beside the cache subdirectory went: %v", err)
	}
	unmountAndWait(t, dir, pid)
	if _, err := os.Stat(filepath.Join(cache, "mountpoint-cache")); !os.IsNotExist(err) {
		t.Errorf("the cache subdirectory is still there after mount-s3 exited (%v); mount-s3 removes it when the session ends", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "kept")); err != nil {
		t.Errorf("a file beside the cache subdirectory went at exit: %v", err)
	}

	notADir := filepath.Join(t.TempDir(), "file")
	mustWrite(t, notADir, "x")
	dir2, _ := mountDir(t)
	code, _, stderr := runStandin(t, f.env, f.args(dir2, "--cache", notADir)...)
	if code != 1 || !strings.Contains(stderr, "failed to create cache directory") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and the cache directory error", code, stderr)
	}
	if _, ok := mountEntry(dir2); ok {
		t.Fatalf("%s is mounted after a failed start", dir2)
	}
}

// TestMountedIn (row M4): an entry at exactly the path as given counts, whatever its type but
// autofs; paths are not canonicalised, and the kernel's escapes are undone.
func TestMountedIn(t *testing.T) {
	info := "36 35 98:0 / /mnt/guard rw,relatime - tmpfs s3csi-guard rw\n" +
		"37 35 0:5 / /mnt/auto rw,relatime - autofs systemd-1 rw,fd=1\n" +
		"38 35 0:50 / /mnt/dead rw,nosuid - fuse mountpoint-s3 rw,user_id=0\n" +
		"39 35 0:51 / /mnt/with\\040space rw - tmpfs x rw\n"
	for path, want := range map[string]bool{
		"/mnt/guard": true, "/mnt/dead": true, "/mnt/with space": true,
		"/mnt/auto": false, "/mnt/guard/": false, "/mnt/./guard": false, "guard": false, "/mnt": false,
	} {
		if got := mountedIn(info, path); got != want {
			t.Errorf("mountedIn(%q) = %t, want %t", path, got, want)
		}
	}
}

// TestACLGatesEveryOperation (row A5): a caller the ACL leaves out gets EACCES for every
// operation but those fuser lets through (read, write, readdir, fsync, release, forget...).
func TestACLGatesEveryOperation(t *testing.T) {
	a := &aclFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), acl: aclOwner, owner: 1000}
	other := fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 2000}}}
	refused := map[string]fuse.Status{
		"getxattr":  func() fuse.Status { _, s := a.GetXAttr(nil, &other, "user.x", nil); return s }(),
		"listxattr": func() fuse.Status { _, s := a.ListXAttr(nil, &other, nil); return s }(),
		"readlink":  func() fuse.Status { _, s := a.Readlink(nil, &other); return s }(),
		"lseek":     a.Lseek(nil, &fuse.LseekIn{InHeader: other}, &fuse.LseekOut{}),
		"getlk":     a.GetLk(nil, &fuse.LkIn{InHeader: other}, &fuse.LkOut{}),
		"fallocate": a.Fallocate(nil, &fuse.FallocateIn{InHeader: other}),
		"statx":     a.Statx(nil, &fuse.StatxIn{InHeader: other}, &fuse.StatxOut{}),
		"statfs":    a.StatFs(nil, &other, &fuse.StatfsOut{}),
		"lookup":    a.Lookup(nil, &other, "x", &fuse.EntryOut{}),
	}
	for op, st := range refused {
		if st != fuse.EACCES {
			t.Errorf("%s by a caller outside the ACL: %v, want EACCES", op, st)
		}
	}
	owner := fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 1000}}}
	if _, st := a.GetXAttr(nil, &owner, "user.x", nil); st == fuse.EACCES {
		t.Errorf("getxattr by the owner refused by the ACL")
	}
	if _, st := a.Read(nil, &fuse.ReadIn{InHeader: other}, nil); st == fuse.EACCES {
		t.Errorf("read by a caller outside the ACL refused; fuser lets it through")
	}
}
