package systemd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
)

// Where each mount's files live: its state directory (record, output), credentials directory,
// cache directory and staging directory, all named after the mount's id.

func (m *Mounter) stateDir(target string) string {
	return filepath.Join(m.cfg.StateDir, mountID(target))
}

// credDir is where the credential files of the mount whose state directory is dir go.
func (m *Mounter) credDir(dir string) string {
	if m.cfg.CredentialsDir == "" {
		return dir
	}
	return filepath.Join(m.cfg.CredentialsDir, filepath.Base(dir))
}

// credDirOf is where the live mount recorded in rec (state directory dir) reads its
// credentials, so that a refresh reaches it: the directory its unit's environment names when
// that is the state directory (a mount of an earlier release, or of a plugin run without
// CredentialsDir) or a directory of the same mount id (a plugin run with another
// CredentialsDir), else credDir.
func (m *Mounter) credDirOf(rec record, dir string) string {
	for _, kv := range rec.Env {
		if v, ok := strings.CutPrefix(kv, "AWS_SHARED_CREDENTIALS_FILE="); ok {
			if d := filepath.Dir(v); filepath.IsAbs(d) && (d == dir || filepath.Base(d) == filepath.Base(dir)) {
				return d
			}
		}
	}
	return m.credDir(dir)
}

// writeCredentials writes c's profile files into the directory cd (its parent created when it
// is the credentials directory) and returns the environment that points mount-s3 at them. For a
// mount-s3 running as u, the directory and files are shared with u's group (0750, 0640).
func (m *Mounter) writeCredentials(cd string, c credentials.Credentials, u *runAs) ([]string, error) {
	if err := m.makeCredParent(cd); err != nil {
		return nil, err
	}
	if u != nil {
		return credentials.WriteProfileForGroup(cd, cd, c, u.GID)
	}
	return credentials.WriteProfile(cd, cd, c)
}

// makeCredParent creates the credentials directory when cd is in it.
func (m *Mounter) makeCredParent(cd string) error {
	if m.cfg.CredentialsDir != "" && filepath.Dir(cd) == m.cfg.CredentialsDir {
		if err := os.MkdirAll(m.cfg.CredentialsDir, 0o700); err != nil {
			return fmt.Errorf("create the credentials directory: %w", err)
		}
	}
	return nil
}

// writeCABundle writes the CA bundle mount-s3 reads and returns its path: in the state
// directory dir (root only) for a mount-s3 running as root, else in the credentials directory,
// shared with u's group.
func (m *Mounter) writeCABundle(dir string, pem []byte, u *runAs) (string, error) {
	if u == nil {
		p := filepath.Join(dir, mounter.CABundleFile)
		if err := os.WriteFile(p, pem, 0o600); err != nil {
			return "", err
		}
		return p, nil
	}
	cd := m.credDir(dir)
	if err := m.makeCredParent(cd); err != nil {
		return "", err
	}
	return credentials.WriteFile(cd, mounter.CABundleFile, pem, u.GID)
}

// ownedPaths renders req's mount-s3 options for the mount whose state directory is dir, its
// mount-s3 running as u: an option whose path the driver owns (--cache) gets a directory of its
// own (cacheDir), which start creates and removeState removes. It also returns those options'
// names. A mount-s3 running as u with neither --allow-other nor --allow-root gets --allow-root:
// it would otherwise let in only its own user (CONFORMANCE.md A2), and root's workloads came in
// when it ran as root; --allow-root keeps exactly root and its own user.
func (m *Mounter) ownedPaths(req mounter.Request, dir string, u *runAs) ([]string, []string) {
	args := req.Args
	if u != nil && !args.Has("allow-other") && !args.Has("allow-root") {
		args = args.Clone()
		args.Set("allow-root", "")
	}
	return mountargs.SetOwnedPaths(args.List(), func(name string) string {
		if name == "cache" {
			return m.cacheDir(dir, u)
		}
		return filepath.Join(dir, name)
	})
}

// stagingDir is where mount-s3 mounts for target before the unit binds its mount onto it.
func (m *Mounter) stagingDir(target string) string {
	return filepath.Join(m.cfg.StagingDir, mountID(target))
}

// oldStagingDir is where earlier releases mounted mount-s3 for a repair: the unpublish of such a
// mount unmounts it there.
func oldStagingDir(dir string) string { return filepath.Join(dir, "repair") }

// saveRecord writes rec in dir and tells the record cache.
func (m *Mounter) saveRecord(dir string, rec record) error {
	if err := writeRecord(dir, rec); err != nil {
		m.records.drop(dir)
		return err
	}
	m.records.put(dir, rec)
	return nil
}

// removeState removes a target's state directory (its record with it), its credentials
// directory and its cache directory in CacheDir, and tells the cache.
func (m *Mounter) removeState(dir string) error {
	defer m.records.drop(dir)
	if m.cfg.CacheDir != "" {
		// A cache mount-s3 wrote as its user: RemoveAll follows no link it may have left.
		if err := os.RemoveAll(filepath.Join(m.cfg.CacheDir, filepath.Base(dir))); err != nil {
			return err
		}
	}
	if cd := m.credDir(dir); cd != dir {
		if err := os.RemoveAll(cd); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}
