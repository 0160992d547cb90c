package systemd

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
)

// TestCredentialsDirectory: credential files go to the credentials directory (created on
// first use) and go with the state at removal; a mount an earlier release started, whose unit
// reads them in its state directory, gets its refresh there.
func TestCredentialsDirectory(t *testing.T) {
	root := t.TempDir()
	m := newMounter(Config{StateDir: filepath.Join(root, "state"), CredentialsDir: filepath.Join(root, "run", "creds")}, nil)
	dir := m.stateDir("/k/pods/p/volumes/kubernetes.io~csi/pv/mount")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := credentials.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret"}
	cd := m.credDirOf(record{}, dir)
	if cd != filepath.Join(root, "run", "creds", filepath.Base(dir)) {
		t.Fatalf("credentials of a new mount in %s", cd)
	}
	env, err := m.writeCredentials(cd, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cd, "credentials")); err != nil {
		t.Errorf("no credentials file in %s (env %v): %v", cd, env, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "credentials")); err == nil {
		t.Error("a credentials file in the state directory")
	}
	earlier := record{Env: []string{"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials")}}
	if got := m.credDirOf(earlier, dir); got != dir {
		t.Errorf("an earlier release's mount refreshes its credentials in %s, want its state directory", got)
	}
	elsewhere := record{Env: []string{"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(root, "other-run", filepath.Base(dir), "credentials")}}
	if got := m.credDirOf(elsewhere, dir); got != filepath.Join(root, "other-run", filepath.Base(dir)) {
		t.Errorf("a mount whose unit reads its credentials in another directory of its id refreshes them in %s", got)
	}
	foreign := record{Env: []string{"AWS_SHARED_CREDENTIALS_FILE=/etc/passwd-dir/credentials"}}
	if got := m.credDirOf(foreign, dir); got != cd {
		t.Errorf("a record naming an unrelated directory makes the refresh write to %s", got)
	}
	if err := m.removeState(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, cd} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after removeState: %v", p, err)
		}
	}
	// Without a credentials directory, the state directory (earlier releases' layout).
	legacy := newMounter(Config{StateDir: filepath.Join(root, "state")}, nil)
	if got := legacy.credDir(dir); got != dir {
		t.Errorf("credDir without CredentialsDir = %s", got)
	}
}

// TestFilesOfAUser: for a mount-s3 running as a dedicated user, its credentials and CA bundle
// are shared with the user's group only (directory 0750, files 0640, owned by root), its cache is
// its own in CacheDir (0700), and all of it goes with the state. A root mount keeps the earlier
// layout (CA bundle and cache in the state directory).
func TestFilesOfAUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to give files to another user (make test runs as root)")
	}
	root := t.TempDir()
	m := newMounter(Config{StateDir: filepath.Join(root, "state"), CredentialsDir: filepath.Join(root, "run"), CacheDir: filepath.Join(root, "cache")}, nil)
	dir := m.stateDir("/k/pods/p/volumes/kubernetes.io~csi/pv/mount")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.cfg.CacheDir, 0o711); err != nil {
		t.Fatal(err)
	}
	u := &runAs{Name: "s3csi-mount", UID: 4242, GID: 4343}
	cd := m.credDir(dir)
	if _, err := m.writeCredentials(cd, credentials.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret"}, u); err != nil {
		t.Fatal(err)
	}
	ca, err := m.writeCABundle(dir, []byte("-----BEGIN CERTIFICATE-----\n"), u)
	if err != nil {
		t.Fatal(err)
	}
	cache := m.cacheDir(dir, u)
	if cache != filepath.Join(root, "cache", filepath.Base(dir)) {
		t.Fatalf("cache of a user's mount at %s", cache)
	}
	if err := makeOwnedDir(cache, u); err != nil {
		t.Fatal(err)
	}
	want := map[string][3]int{ // path: mode, uid, gid
		cd:                               {0o750, 0, u.GID},
		filepath.Join(cd, "credentials"): {0o640, 0, u.GID},
		filepath.Join(cd, "config"):      {0o640, 0, u.GID},
		ca:                               {0o640, 0, u.GID},
		cache:                            {0o700, u.UID, u.GID},
	}
	for p, w := range want {
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		sys := st.Sys().(*syscall.Stat_t)
		if got := [3]int{int(st.Mode().Perm()), int(sys.Uid), int(sys.Gid)}; got != w {
			t.Errorf("%s: mode %o, uid %d, gid %d; want %o, %d, %d", p, got[0], got[1], got[2], w[0], w[1], w[2])
		}
	}
	if filepath.Dir(ca) != cd {
		t.Errorf("the CA bundle of a user's mount is at %s, want in %s", ca, cd)
	}
	if err := m.removeState(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, cd, cache} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after removeState: %v", p, err)
		}
	}
	// As root: the state directory, as before.
	if got := m.cacheDir(dir, nil); got != filepath.Join(dir, "cache") {
		t.Errorf("cache of a root mount at %s", got)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if p, err := m.writeCABundle(dir, []byte("x"), nil); err != nil || filepath.Dir(p) != dir {
		t.Errorf("CA bundle of a root mount at %s (%v), want in the state directory", p, err)
	}
}
