// Package systemd implements mounter.Mounter by running each mount-s3 as a transient systemd
// unit on the host, over systemd's private D-Bus socket (go-systemd). This is the legacy (v1)
// mount path: it needs no Mountpoint Pods, only mount-s3 installed on the host.
//
// Per mount (the target path determines every name, so a restarted plugin finds its work):
//   - unit mount-s3-<id>.service, Type=forking: systemd reports the start job done only when
//     mount-s3's parent exits 0, which it does once the FUSE mount is ready;
//   - state directory <StateDir>/<id>/ (0700) holding the AWS profile files (0600) the unit
//     reads through AWS_PROFILE/AWS_CONFIG_FILE/AWS_SHARED_CREDENTIALS_FILE, mount-s3's output
//     (mount-s3.log, quoted in errors) and a small record of what is mounted;
//   - unmount runs `umount <target>` as a oneshot unit mount-s3-umount-<id>.service, so it
//     happens in the host's mount namespace whatever the plugin's own namespace is.
//
// Credentials never appear in argv, unit properties or logs.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// Config configures a Mounter. Paths are host paths; the plugin must see StateDir and every
// target at the same paths as the host (the kubelet directory is mounted at its host path).
type Config struct {
	// SystemdSocket is systemd's private D-Bus socket, e.g. /run/systemd/private.
	SystemdSocket string
	// MountS3Path is the host path of the mount-s3 binary.
	MountS3Path string
	// UmountPath is the host path of umount(8).
	UmountPath string
	// StateDir holds one directory per mount (credentials, output, record).
	StateDir string
	// StartTimeout bounds how long systemd lets mount-s3 take to mount (default 60s).
	StartTimeout time.Duration
}

// Mounter runs mount-s3 as transient systemd units. It is safe for concurrent use on distinct
// targets; callers serialise operations on the same target.
type Mounter struct {
	cfg   Config
	bus   *bus
	table mounttable.Table
}

var _ mounter.Mounter = (*Mounter)(nil)

// New returns a Mounter. It does not connect yet: the D-Bus connection is made on first use and
// remade whenever it drops, so the plugin starts (and Check reports the problem) while systemd
// is unreachable.
func New(cfg Config) (*Mounter, error) {
	if cfg.SystemdSocket == "" || cfg.MountS3Path == "" || cfg.UmountPath == "" || cfg.StateDir == "" {
		return nil, errors.New("systemd mounter: SystemdSocket, MountS3Path, UmountPath and StateDir are required")
	}
	return newMounter(cfg, dialPrivate(cfg.SystemdSocket)), nil
}

func newMounter(cfg Config, dial dialFunc) *Mounter {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	return &Mounter{cfg: cfg, bus: &bus{dial: dial}}
}

// Close drops the D-Bus connection. Units keep running.
func (m *Mounter) Close() { m.bus.close() }

// Check reports whether systemd answers over D-Bus; it reconnects if needed.
func (m *Mounter) Check(ctx context.Context) error {
	return m.bus.do(func(c dbusConn) error {
		_, err := c.SystemStateContext(ctx)
		return err
	})
}

func (m *Mounter) stateDir(target string) string {
	return filepath.Join(m.cfg.StateDir, mountID(target))
}

// Mount implements mounter.Mounter.
func (m *Mounter) Mount(ctx context.Context, req mounter.Request) error {
	dir := m.stateDir(req.Target)
	unit := MountUnitName(req.Target)
	state, entry, err := m.table.Inspect(req.Target)
	if err != nil {
		return err
	}
	switch state {
	case mounttable.Mounted:
		return m.remount(req, dir, entry)
	case mounttable.Corrupted:
		klog.InfoS("Target holds a corrupted mount, unmounting it before mounting again", "target", req.Target, "unit", unit)
		if err := m.Unmount(ctx, req.Target); err != nil {
			return fmt.Errorf("clear corrupted mount: %w", err)
		}
		state = mounttable.NotFound
	}
	createdTarget := false
	if state == mounttable.NotFound {
		if err := os.Mkdir(req.Target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create target directory: %w", err)
		}
		createdTarget = true
	}
	err = m.start(ctx, req, dir, unit)
	if err != nil {
		// Clean up on a context that outlives a cancelled request.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := m.stopUnit(cctx, unit); cerr != nil {
			// The state directory stays: it is how a later unpublish knows a unit may be left
			// (HasLeftovers) and stops it.
			klog.ErrorS(cerr, "Cleanup after a failed mount could not stop the unit", "unit", unit, "target", req.Target)
		} else if cerr := os.RemoveAll(dir); cerr != nil {
			klog.ErrorS(cerr, "Cleanup after a failed mount could not remove the state directory", "target", req.Target)
		}
		if createdTarget {
			if cerr := os.Remove(req.Target); cerr != nil && !errors.Is(cerr, os.ErrNotExist) {
				klog.ErrorS(cerr, "Cleanup after a failed mount could not remove the target", "target", req.Target)
			}
		}
	}
	return err
}

// remount handles Mount on a target that already has a healthy mount: success (after a
// credential refresh) when it is this volume, ErrTargetInUse otherwise.
func (m *Mounter) remount(req mounter.Request, dir string, entry *mounttable.Entry) error {
	if !mounttable.IsMountS3(entry) {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount", mounter.ErrTargetInUse, req.Target, entry.FsType, entry.Source)
	}
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("%w: %s holds a mount-s3 mount this driver has no record of (%v)", mounter.ErrTargetInUse, req.Target, err)
	}
	if rec.VolumeID != req.VolumeID || rec.Bucket != req.Bucket {
		return fmt.Errorf("%w: %s already holds volume %q (bucket %q)", mounter.ErrTargetInUse, req.Target, rec.VolumeID, rec.Bucket)
	}
	if rec.ReadOnly != req.ReadOnly {
		return fmt.Errorf("%w: volume %q is already published at %s with read-only=%t", mounter.ErrTargetInUse, req.VolumeID, req.Target, rec.ReadOnly)
	}
	if args := req.Args.List(); !slices.Equal(args, rec.Args) {
		klog.InfoS("Mount options changed; they apply from the next mount of this target", "target", req.Target, "volumeID", req.VolumeID)
	}
	if req.Credentials != nil {
		if _, err := credentials.WriteProfile(dir, dir, *req.Credentials); err != nil {
			return fmt.Errorf("refresh credentials: %w", err)
		}
		klog.V(4).InfoS("Refreshed credentials of a live mount", "target", req.Target, "volumeID", req.VolumeID)
	}
	return nil
}

// start launches the mount unit for a target that holds no mount and waits until mount-s3
// mounted it. The caller cleans up when it fails.
func (m *Mounter) start(ctx context.Context, req mounter.Request, dir, unit string) error {
	// A unit left by an interrupted publish (plugin killed mid-way) must go first.
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("reset state directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	env := slices.Clone(req.Env)
	if req.CABundle != nil {
		p := filepath.Join(dir, mounter.CABundleFile)
		if err := os.WriteFile(p, req.CABundle, 0o644); err != nil {
			return fmt.Errorf("write CA bundle: %w", err)
		}
		env = append(env, "AWS_CA_BUNDLE="+p)
	}
	if req.Credentials != nil {
		credEnv, err := credentials.WriteProfile(dir, dir, *req.Credentials)
		if err != nil {
			return fmt.Errorf("write credentials: %w", err)
		}
		env = append(env, credEnv...)
	}
	args := req.Args.List()
	if err := writeRecord(dir, record{VolumeID: req.VolumeID, Bucket: req.Bucket, Target: req.Target, ReadOnly: req.ReadOnly, Args: args}); err != nil {
		return err
	}
	spec := unitSpec{
		description: fmt.Sprintf("mount-s3 for S3 CSI volume %s at %s", req.VolumeID, req.Target),
		kind:        "forking",
		argv:        append(append([]string{m.cfg.MountS3Path}, args...), req.Bucket, req.Target),
		env:         env,
		logFile:     filepath.Join(dir, logFileName),
		timeout:     m.cfg.StartTimeout,
	}
	klog.V(4).InfoS("Starting mount unit", "unit", unit, "target", req.Target, "bucket", req.Bucket, "args", args)
	result, err := m.runUnit(ctx, unit, spec)
	if err != nil {
		return err
	}
	output := tail(spec.logFile, 4096)
	if result != "done" {
		return fmt.Errorf("%w: mounting bucket %q at %s (unit %s, job %s): %s", mounter.ErrMountFailed, req.Bucket, req.Target, unit, result, orNoOutput(output))
	}
	state, entry, err := m.table.Inspect(req.Target)
	if err != nil {
		return err
	}
	if state != mounttable.Mounted || !mounttable.IsMountS3(entry) {
		return fmt.Errorf("%w: mount-s3 reported success but %s is %s: %s", mounter.ErrMountFailed, req.Target, state, orNoOutput(output))
	}
	klog.V(2).InfoS("Mounted", "unit", unit, "target", req.Target, "bucket", req.Bucket, "volumeID", req.VolumeID)
	return nil
}

func orNoOutput(s string) string {
	if s == "" {
		return "(mount-s3 printed nothing)"
	}
	return s
}

// runUnit starts a transient unit and waits for its start job.
func (m *Mounter) runUnit(ctx context.Context, name string, spec unitSpec) (string, error) {
	c, err := m.bus.get()
	if err != nil {
		return "", err
	}
	ch := make(chan string, 1)
	if _, err := c.StartTransientUnitContext(ctx, name, "fail", spec.properties(), ch); err != nil {
		return "", fmt.Errorf("start unit %s: %w", name, err)
	}
	res, err := waitJob(ctx, c, ch)
	if err != nil {
		return "", fmt.Errorf("wait for unit %s: %w", name, err)
	}
	return res, nil
}

// stopUnit stops a unit and waits for it to be gone; a unit that is not loaded is fine. It
// first lists loaded units by name, which (unlike StopUnit on an unknown name) does not make
// systemd search the disk for a unit file: the common case, no unit, stays cheap.
func (m *Mounter) stopUnit(ctx context.Context, name string) error {
	return m.bus.do(func(c dbusConn) error {
		loaded, err := c.ListUnitsByPatternsContext(ctx, nil, []string{name})
		if err != nil {
			return fmt.Errorf("list unit %s: %w", name, err)
		}
		if len(loaded) == 0 {
			return nil
		}
		ch := make(chan string, 1)
		if _, err := c.StopUnitContext(ctx, name, "replace", ch); err != nil {
			if isNoSuchUnit(err) {
				return nil
			}
			return fmt.Errorf("stop unit %s: %w", name, err)
		}
		if _, err := waitJob(ctx, c, ch); err != nil {
			return fmt.Errorf("stop unit %s: %w", name, err)
		}
		// A unit that failed before CollectMode applied may linger as "failed".
		if err := c.ResetFailedUnitContext(ctx, name); err != nil && !isNoSuchUnit(err) {
			klog.V(4).InfoS("Reset of a stopped unit failed", "unit", name, "err", err)
		}
		return nil
	})
}

// HasLeftovers reports whether the mounter holds state for target (its state directory): a
// publish that was interrupted, or whose cleanup could not stop its unit, leaves it, and only
// Unmount clears it. No state directory means no unit either: start creates the directory
// before the unit and cleanup stops the unit before removing the directory.
func (m *Mounter) HasLeftovers(target string) bool {
	_, err := os.Lstat(m.stateDir(target))
	return err == nil
}

var _ mounter.Leftovers = (*Mounter)(nil)

// Unmount implements mounter.Mounter.
func (m *Mounter) Unmount(ctx context.Context, target string) error {
	dir := m.stateDir(target)
	unit := MountUnitName(target)
	state, entry, err := m.table.Inspect(target)
	if err != nil {
		return err
	}
	if state == mounttable.Mounted && !mounttable.IsMountS3(entry) {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount; not unmounting it", mounter.ErrTargetInUse, target, entry.FsType, entry.Source)
	}
	if state == mounttable.Mounted || state == mounttable.Corrupted {
		if err := m.umount(ctx, target, dir); err != nil {
			return err
		}
	}
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove state directory: %w", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Never remove anything recursively from a target; a non-empty directory is left as is.
		klog.InfoS("Target directory not removed", "target", target, "err", err)
	}
	klog.V(2).InfoS("Unmounted", "unit", unit, "target", target)
	return nil
}

// umount unmounts target in the host's mount namespace through a oneshot unit.
func (m *Mounter) umount(ctx context.Context, target, dir string) error {
	unit := umountUnitName(target)
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	logFile := filepath.Join(dir, "umount.log")
	spec := unitSpec{
		description: "unmount S3 CSI volume at " + target,
		kind:        "oneshot",
		argv:        []string{m.cfg.UmountPath, target},
		logFile:     logFile,
		timeout:     30 * time.Second,
	}
	result, err := m.runUnit(ctx, unit, spec)
	if err != nil {
		return err
	}
	if result == "done" {
		return nil
	}
	// A concurrent unmount by someone else is fine.
	if state, _, err := m.table.Inspect(target); err == nil && (state == mounttable.NotMounted || state == mounttable.NotFound) {
		return nil
	}
	return fmt.Errorf("unmount %s (unit %s, job %s): %s", target, unit, result, orNoOutput(tail(logFile, 4096)))
}
