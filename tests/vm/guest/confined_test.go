package guest

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// mountS3IDs are the uid and gid of the user the harness's node plugin runs mount-s3 as (made
// on the guest by the plugin's ensure-user unit at its first mount).
func mountS3IDs(t *testing.T) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup(harness.MountS3User)
	if err != nil {
		t.Fatalf("user %s on the guest: %v", harness.MountS3User, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 || gid == 0 {
		t.Fatalf("user %s has uid %d gid %d: root", harness.MountS3User, uid, gid)
	}
	return uid, gid
}

// checkConfined checks, in /proc/<pid>/status, what PID 1 really applied to the process: every
// capability set empty, no_new_privs, a seccomp filter (mode 2), and mount-s3's user in each of
// the real, effective, saved and file-system uids and gids.
func checkConfined(t *testing.T, pid int) {
	t.Helper()
	if pid == 0 {
		t.Fatal("the unit has no main process")
	}
	uid, gid := mountS3IDs(t)
	status := readFile(t, fmt.Sprintf("/proc/%d/status", pid))
	field := func(name string) string {
		for _, line := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.Join(strings.Fields(v), " ")
			}
		}
		return ""
	}
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
		"Uid": strings.Repeat(strconv.Itoa(uid)+" ", 3) + strconv.Itoa(uid),
		"Gid": strings.Repeat(strconv.Itoa(gid)+" ", 3) + strconv.Itoa(gid),
	}
	for name, w := range want {
		if got := field(name); got != w {
			t.Errorf("mount-s3 (pid %d) %s: %q, want %q", pid, name, got, w)
		}
	}
	t.Logf("mount-s3 (pid %d): CapEff %s CapBnd %s NoNewPrivs %s Seccomp %s Uid %s", pid, field("CapEff"), field("CapBnd"), field("NoNewPrivs"), field("Seccomp"), field("Uid"))
}

// checkCredentialFiles checks a mount's credential directory: on a tmpfs (or ramfs), 0750 and
// root's with mount-s3's group, holding at least one file, each 0640 and root's with that group.
func checkCredentialFiles(t *testing.T, dir string) {
	t.Helper()
	_, gid := mountS3IDs(t)
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatalf("the mount's credential directory: %v", err)
	}
	if sfs.Type != unix.TMPFS_MAGIC && sfs.Type != unix.RAMFS_MAGIC {
		t.Errorf("%s is on file system magic %#x, want a tmpfs or ramfs (never the node's disk)", dir, sfs.Type)
	}
	owned := func(path string, mode fs.FileMode) {
		st, err := os.Lstat(path)
		if err != nil {
			t.Error(err)
			return
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode() != mode || sys.Uid != 0 || int(sys.Gid) != gid {
			t.Errorf("%s is %v %d:%d, want %v 0:%d", path, st.Mode(), sys.Uid, sys.Gid, mode, gid)
		}
	}
	owned(dir, fs.ModeDir|0o750)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("no credential files in %s (%v)", dir, err)
	}
	for _, e := range entries {
		owned(filepath.Join(dir, e.Name()), 0o640)
	}
}

// fileHolding returns the first regular file below dir (not below another file system mounted
// there, such as the FUSE mount itself) whose first MiB holds secret, "" when none does.
func fileHolding(t *testing.T, dir, secret string) string {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var found string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		if bytes.Contains(b, []byte(secret)) {
			found = path
		}
		return nil
	})
	harness.Must(t, err)
	return found
}
