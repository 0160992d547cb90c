package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/sysuser"
)

// mount-s3 as a dedicated system user (Config.MountS3User, ADR 0010). With the descriptor
// hand-over mount-s3 needs no capability; as root without capabilities it could still write
// every root-owned file of the host (/etc, unit files) and read every other mount's
// credentials. As a user of its own it reaches only what is granted to it:
//   - its credentials directory <CredentialsDir>/<id> (0750, root and the user's group; the
//     profile files and the CA bundle 0640), inside CredentialsDir made 0711 (no listing);
//   - its cache directory <CacheDir>/<id> (0700, the user's), inside CacheDir (0711);
//   - the FUSE connection systemd hands it (fd 3), its output file (opened by systemd).
//
// The user is created when missing by scality-fuse-helper's ensure-user, run once per plugin
// start as a oneshot unit with full privileges (systemd-sysusers or useradd on the host). A
// mount records the identity it was started with (record.RunAs) and keeps it for life: a
// repair starts it as the same user with the same files; mounts of earlier releases stay root.

// userUnitName is the oneshot unit that makes sure the user exists.
const userUnitName = "mount-s3-ensure-user.service"

// idsFileName is where ensure-user writes the user's ids, in StateDir.
const idsFileName = ".mount-s3-user"

// userRetry is how long after a failed ensure-user the next mount tries again.
const userRetry = time.Minute

// runAs is the identity a mount unit's mount-s3 runs as.
type runAs struct {
	Name string `json:"name"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// userState caches the outcome of ensure-user.
type userState struct {
	mu     sync.Mutex
	ids    *runAs
	failed time.Time // last failure (zero: none)
}

// mountUser returns the identity new mount units run mount-s3 as, or nil for root: no user
// configured, no descriptor hand-over (mount-s3 then mounts FUSE itself, which needs root), or
// the user could not be made sure of (logged; tried again after userRetry). Publishes that
// come while ensure-user runs wait for its outcome instead of starting as root: a mount keeps
// the identity it started with for life.
func (m *Mounter) mountUser(ctx context.Context) *runAs {
	if m.cfg.MountS3User == "" || m.cfg.CredentialsDir == "" || m.cfg.CacheDir == "" || !m.useHandover(ctx) {
		return nil
	}
	u := &m.user
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ids != nil {
		return u.ids
	}
	if !u.failed.IsZero() && time.Since(u.failed) < userRetry {
		return nil
	}
	ids, err := m.ensureUser(ctx)
	if err != nil {
		u.failed = time.Now()
		klog.ErrorS(err, "mount-s3 runs as root (without capabilities) until its user can be made sure of; tried again in a minute",
			"user", m.cfg.MountS3User, "unit", userUnitName)
		return nil
	}
	u.ids, u.failed = ids, time.Time{}
	for _, d := range []string{m.cfg.CredentialsDir, m.cfg.CacheDir} {
		// The user may pass through, not list: it knows only its own mounts' directories.
		if err := os.MkdirAll(d, 0o711); err != nil { //nolint:gosec // G301: traversal only, no listing
			klog.ErrorS(err, "Could not create a directory mount-s3's user needs", "dir", d)
			u.ids = nil
			return nil
		}
		if err := os.Chmod(d, 0o711); err != nil { //nolint:gosec // G302: traversal only, no listing
			klog.ErrorS(err, "Could not let mount-s3's user through a directory", "dir", d)
			u.ids = nil
			return nil
		}
	}
	klog.InfoS("mount-s3 units run as a dedicated user", "user", ids.Name, "uid", ids.UID, "gid", ids.GID)
	return u.ids
}

// ensureUser runs scality-fuse-helper ensure-user in a oneshot unit and reads the ids it wrote.
func (m *Mounter) ensureUser(ctx context.Context) (*runAs, error) {
	idsFile := filepath.Join(m.cfg.StateDir, idsFileName)
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(idsFile)
	if err := m.stopUnit(ctx, userUnitName); err != nil {
		return nil, err
	}
	logFile := filepath.Join(m.cfg.StateDir, idsFileName+".log")
	spec := unitSpec{
		description:    "Make sure the user mount-s3 of the S3 CSI driver runs as exists",
		kind:           "oneshot",
		argv:           []string{m.cfg.FuseHelperPath, "ensure-user", "--ids-file", idsFile, m.cfg.MountS3User},
		logFile:        logFile,
		timeout:        time.Minute,
		fullPrivileges: true, // it may add the user to /etc/passwd, /etc/group and /etc/shadow
	}
	result, err := m.runUnit(ctx, userUnitName, spec)
	output := tail(logFile, 2048)
	_ = os.Remove(logFile)
	defer os.Remove(idsFile) // a message from the helper, read once
	if err != nil {
		return nil, err
	}
	if result != "done" {
		return nil, fmt.Errorf("unit %s: %s: %s", userUnitName, result, orNoOutput(output))
	}
	state, err := confined.Open(m.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer state.Close()
	b, truncated, err := state.ReadFile(idsFileName, sysuser.MaxIDsFile)
	if err != nil {
		return nil, err
	}
	if truncated {
		return nil, fmt.Errorf("%s is longer than %d bytes", idsFile, sysuser.MaxIDsFile)
	}
	ids, err := sysuser.ParseIDs(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", idsFile, err)
	}
	return &runAs{Name: m.cfg.MountS3User, UID: ids.UID, GID: ids.GID}, nil
}

// userProperties are the unit properties that run its processes (not its "+" commands) as u.
func (u *runAs) properties() []sd.Property {
	if u == nil {
		return nil
	}
	return []sd.Property{
		{Name: "User", Value: dbus.MakeVariant(u.Name)},
		{Name: "Group", Value: dbus.MakeVariant(u.Name)},
	}
}

// cacheDir is where the mount with state directory dir keeps the cache of its mount-s3 running
// as u: in CacheDir for a user (the state directory is out of its reach), else in dir.
func (m *Mounter) cacheDir(dir string, u *runAs) string {
	if u == nil || m.cfg.CacheDir == "" {
		return filepath.Join(dir, "cache")
	}
	return filepath.Join(m.cfg.CacheDir, filepath.Base(dir))
}

// makeOwnedDir creates a directory mount-s3 writes (its cache): owned by u when set.
func makeOwnedDir(path string, u *runAs) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	if u == nil {
		return nil
	}
	if err := os.Lchown(path, u.UID, u.GID); err != nil {
		return errors.Join(err, os.Remove(path))
	}
	return nil
}
