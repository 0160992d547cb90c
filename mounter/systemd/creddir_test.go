package systemd

import (
	"os"
	"path/filepath"
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
	env, err := m.writeCredentials(cd, c)
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
