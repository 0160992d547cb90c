package systemd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/sysuser"
)

// TestMountUserFallsBackToRoot: when the unit that makes sure of mount-s3's user fails, or
// leaves no ids, mounts run as root (nil) and the next mount within userRetry does not start
// the unit again; once it succeeds the ids it wrote are used and kept, and the directories the
// user passes through are made 0711.
func TestMountUserFallsBackToRoot(t *testing.T) {
	root := t.TempDir()
	cfg := Config{StateDir: filepath.Join(root, "state"), CredentialsDir: filepath.Join(root, "run"), CacheDir: filepath.Join(root, "cache"),
		MountS3User: "s3csi-mount", FuseHelperPath: "/opt/bin/scality-fuse-helper"}
	starts := func(c *fakeConn) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(slices.DeleteFunc(slices.Clone(c.calls), func(s string) bool { return s != "start "+userUnitName }))
	}
	ctx := context.Background()

	failing := &fakeConn{connected: true, absent: true, jobResult: "failed"}
	dial, _ := dialer(failing)
	m := newMounter(cfg, dial)
	if u := m.mountUser(ctx); u != nil {
		t.Fatalf("mountUser after a failed unit = %+v, want nil (root)", u)
	}
	if u := m.mountUser(ctx); u != nil || starts(failing) != 1 {
		t.Fatalf("a second mount: user %+v, %d starts of %s; want root and no retry within a minute", u, starts(failing), userUnitName)
	}

	noIDs := &fakeConn{connected: true, absent: true, jobResult: "done"}
	dial, _ = dialer(noIDs)
	m = newMounter(cfg, dial)
	if u := m.mountUser(ctx); u != nil {
		t.Fatalf("mountUser without an ids file = %+v, want nil", u)
	}

	// Done, with the ids the helper would have written (the fake starts nothing).
	ok := &fakeConn{connected: true, absent: true, jobResult: "done", onStart: func(string) {
		if err := sysuser.WriteIDs(filepath.Join(cfg.StateDir, idsFileName), sysuser.IDs{UID: 990, GID: 991}); err != nil {
			t.Error(err)
		}
	}}
	dial, _ = dialer(ok)
	m = newMounter(cfg, dial)
	u := m.mountUser(ctx)
	if u == nil || *u != (runAs{Name: "s3csi-mount", UID: 990, GID: 991}) {
		t.Fatalf("mountUser = %+v, want s3csi-mount 990/991", u)
	}
	if again := m.mountUser(ctx); again != u || starts(ok) != 1 {
		t.Errorf("the user is made sure of once per start: %d starts", starts(ok))
	}
	for _, d := range []string{cfg.CredentialsDir, cfg.CacheDir} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o711 {
			t.Errorf("%s: %v %v, want 0711", d, st, err)
		}
	}
	if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left in the state directory: %s", strings.Join(names, " "))
	}
}
