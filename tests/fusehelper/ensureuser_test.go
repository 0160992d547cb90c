package fusehelper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// ensureUser runs scality-fuse-helper ensure-user in a mount namespace of its own whose /etc is
// etc (a copy of this machine's), so that the user it may create never reaches the machine.
// With hide, the directories it names are covered with an empty tmpfs first (a host without
// the tools in them).
func ensureUser(t *testing.T, etc, idsFile, name string, hide ...string) (string, error) {
	t.Helper()
	script := fmt.Sprintf("mount --bind %s /etc", etc)
	for _, d := range hide {
		script += " && mount -t tmpfs none " + d
	}
	script += fmt.Sprintf(" && exec %s ensure-user --ids-file %s %s", harness.Bin(t, "scality-fuse-helper"), idsFile, name)
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	return string(out), err
}

// TestEnsureUser: the helper creates a missing system user (a group of the same name, no login
// shell) with the host's systemd-sysusers and writes its ids; a second run finds it and adds
// nothing; a name that is not a portable user name, or root, is refused before anything runs.
func TestEnsureUser(t *testing.T) {
	harness.RequireRoot(t)
	etc := filepath.Join(t.TempDir(), "etc")
	harness.Must(t, exec.Command("cp", "-a", "/etc", etc).Run())
	ids := filepath.Join(t.TempDir(), "ids")
	const name = "s3csi-test-mount"
	if out, err := ensureUser(t, etc, ids, name); err != nil {
		t.Fatalf("ensure-user: %v: %s", err, out)
	}
	f := createdUser(t, etc, ids, name)
	if !strings.HasSuffix(f[6], "nologin") {
		t.Fatalf("passwd entry %q, want no login shell", strings.Join(f, ":"))
	}
	passwd, err := os.ReadFile(filepath.Join(etc, "passwd"))
	harness.Must(t, err)
	b, err := os.ReadFile(ids)
	harness.Must(t, err)

	// Again: found, not added twice.
	harness.Must(t, os.Remove(ids))
	if out, err := ensureUser(t, etc, ids, name); err != nil {
		t.Fatalf("ensure-user again: %v: %s", err, out)
	}
	passwd2, _ := os.ReadFile(filepath.Join(etc, "passwd"))
	if string(passwd2) != string(passwd) {
		t.Errorf("a second run changed passwd")
	}
	if b2, _ := os.ReadFile(ids); string(b2) != string(b) {
		t.Errorf("ids file %q after the second run, want %q", b2, b)
	}

	for _, bad := range []string{"root", "S3", "a/b"} {
		out, err := ensureUser(t, etc, filepath.Join(t.TempDir(), "ids"), bad)
		if err == nil || !strings.Contains(out, "user name") {
			t.Errorf("ensure-user %q: %v %s, want a refusal naming the user name", bad, err, out)
		}
	}
	if passwd3, _ := os.ReadFile(filepath.Join(etc, "passwd")); string(passwd3) != string(passwd) {
		t.Errorf("a refused name changed passwd")
	}
}

// TestEnsureUserWithUseradd: on a host without systemd-sysusers (here hidden with all of
// /usr/bin, which also hides /usr/bin/false) the helper creates the user with useradd: a
// system user with a group of its own, no home, and the first no-login shell the host has.
func TestEnsureUserWithUseradd(t *testing.T) {
	harness.RequireRoot(t)
	for _, tool := range []string{"/usr/sbin/useradd", "/usr/sbin/nologin"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("this test needs %s on the machine: %v", tool, err)
		}
	}
	etc := filepath.Join(t.TempDir(), "etc")
	harness.Must(t, exec.Command("cp", "-a", "/etc", etc).Run())
	ids := filepath.Join(t.TempDir(), "ids")
	const name = "s3csi-test-useradd"
	if out, err := ensureUser(t, etc, ids, name, "/usr/bin"); err != nil {
		t.Fatalf("ensure-user: %v: %s", err, out)
	}
	f := createdUser(t, etc, ids, name)
	if f[5] != "/" || f[6] != "/usr/sbin/nologin" {
		t.Fatalf("passwd entry %q, want home / and shell /usr/sbin/nologin", strings.Join(f, ":"))
	}
	if uid, err := strconv.Atoi(f[2]); err != nil || uid >= 1000 {
		t.Errorf("uid %s, want a system uid (below 1000)", f[2])
	}
}

// createdUser checks what ensure-user made for name in etc (a copy of /etc) and returns its
// passwd fields: a user that is not root, with the driver's comment, a group of the same name
// and gid, its ids in the ids file, and nothing in this machine's /etc/passwd.
func createdUser(t *testing.T, etc, ids, name string) []string {
	t.Helper()
	passwd, err := os.ReadFile(filepath.Join(etc, "passwd"))
	harness.Must(t, err)
	var f []string
	for _, l := range strings.Split(string(passwd), "\n") {
		if strings.HasPrefix(l, name+":") {
			f = strings.Split(l, ":")
		}
	}
	if len(f) != 7 || f[2] == "0" || f[3] == "0" || f[4] != "S3 CSI driver mount-s3" {
		t.Fatalf("passwd entry %q, want a user that is not root, commented %q", strings.Join(f, ":"), "S3 CSI driver mount-s3")
	}
	group, err := os.ReadFile(filepath.Join(etc, "group"))
	harness.Must(t, err)
	if !strings.Contains(string(group), "\n"+name+":x:"+f[3]+":") {
		t.Errorf("no group %s with gid %s", name, f[3])
	}
	if mine, _ := os.ReadFile("/etc/passwd"); strings.Contains(string(mine), name+":") {
		t.Fatalf("the user reached this machine's /etc/passwd")
	}
	b, err := os.ReadFile(ids)
	harness.Must(t, err)
	if got, want := string(b), f[2]+" "+f[3]+"\n"; got != want {
		t.Errorf("ids file %q, want %q", got, want)
	}
	return f
}
