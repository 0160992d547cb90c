// Package systemd implements mounter.Mounter by running each mount-s3 as a transient systemd
// unit on the host, over systemd's private D-Bus socket (go-systemd). This is the legacy (v1)
// mount path: it needs no Mountpoint Pods, only mount-s3 installed on the host.
//
// Per mount (the target path determines every name, so a restarted plugin finds its work):
//   - unit mount-s3-<id>.service, Type=forking: systemd reports the start job done only when
//     mount-s3's parent exits 0, which it does once the FUSE mount is ready;
//   - state directory <StateDir>/<id>/ (0700) holding mount-s3's output (mount-s3.log, quoted
//     in errors) and a small record of what is mounted;
//   - credentials directory <CredentialsDir>/<id>/ (0700, on a tmpfs) holding the AWS profile
//     files (0600) the unit reads through AWS_PROFILE/AWS_CONFIG_FILE/AWS_SHARED_CREDENTIALS_FILE;
//   - mount-s3 refuses a mount point that already is one, so it mounts at the staging directory
//     <StagingDir>/<id>, and the unit binds that onto the target twice (ExecStartPost, see
//     startRecorded): when one mount at the target is unmounted under the workload, the other
//     still serves the bucket instead of the target showing the node's disk;
//   - unmount runs `umount -- <target> <target> <staging>` (one argument per mount of ours,
//     forced for a dead mount) as a oneshot unit mount-s3-umount-<id>.service, so it happens in
//     the host's mount namespace whatever the plugin's own namespace is; it must succeed.
//
// Liveness is judged by mounthealth (a statfs answered by mount-s3 within a deadline), never
// by a stat that the kernel may answer from its cache. A dead mount is replaced by a new unit on
// the next Mount (kubelet's republish) or Repair (the node plugin's own monitor).
//
// Credentials never appear in argv, unit properties or logs.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
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
	// StateDir holds one directory per mount (output, record).
	StateDir string
	// CredentialsDir holds one directory per mount with its AWS profile files: a tmpfs (/run)
	// keeps credentials off the node's disk, and a reboot clears them. Empty: the state
	// directory, as earlier releases did; their mounts keep their files where they are.
	CredentialsDir string
	// StagingDir holds one directory per mount at which mount-s3 mounts before the unit binds
	// that mount onto the target. It must not be inside a directory the node plugin's container
	// also mounts at another path (the plugin directory, its /csi): the container's copy of a
	// mount there, made when it starts and never unmounted by the host's umount, would keep the
	// directory busy and mount-s3 serving after the unpublish.
	StagingDir string
	// StartTimeout bounds how long systemd lets mount-s3 take to mount (default 60s).
	StartTimeout time.Duration
	// MountPath is the host path of mount(8), which binds mount-s3's mount onto the target
	// (default /bin/mount).
	MountPath string
	// Health judges mounts (default: a Checker with mounthealth's default deadline).
	Health *mounthealth.Checker
	// FuseHelperPath is the host path of scality-fuse-helper. When set (and systemd is 246 or
	// later), mount units get their FUSE connection from it and mount-s3 runs with no
	// capability (handover.go); empty: mount-s3 mounts FUSE itself, holding CAP_SYS_ADMIN.
	FuseHelperPath string
	// MountS3User is the system user mount-s3 runs as in units with the descriptor hand-over
	// (user.go), created on the host when missing; it needs CredentialsDir and CacheDir. Empty:
	// root (without capabilities).
	MountS3User string
	// ProtectSystem gives each mount unit with the descriptor hand-over a mount namespace of its
	// own (protect.go): the node's file systems read-only but for the mount's cache, a private
	// /tmp and /dev. Ignored without the hand-over (mount-s3 mounts FUSE itself then).
	ProtectSystem bool
	// CacheDir holds one cache directory per mount whose mount-s3 runs as MountS3User (the
	// state directory is out of its reach); it must not be on a tmpfs. Mounts run as root keep
	// their cache in their state directory.
	CacheDir string
	// MaxCacheMiB bounds mount-s3's --max-cache-size for a mount with a cache (0: no bound):
	// the cache directory in the mount's state directory stays within it.
	MaxCacheMiB uint64
	// CallTimeout bounds each D-Bus call to systemd (default 30s) and DialTimeout each
	// connection attempt (default 5s): a stuck systemd makes operations fail with
	// mounter.ErrUnavailable instead of hanging.
	CallTimeout, DialTimeout time.Duration
}

// Mounter runs mount-s3 as transient systemd units. It is safe for concurrent use on distinct
// targets; callers serialise operations on the same target.
type Mounter struct {
	cfg      Config
	bus      *bus
	health   *mounthealth.Checker
	records  recordCache // what Targets and Recorded read every monitor sweep
	jobs     *prometheus.HistogramVec
	endings  endings // how failed mount units ended, read when they are reset
	handover handoverState
	user     userState
	units    unitWatch // which unit signals mean a mount-s3 stopped on its own
}

var _ mounter.Mounter = (*Mounter)(nil)

// Collectors returns the mounter's metrics, for a Prometheus registry.
func (m *Mounter) Collectors() []prometheus.Collector { return []prometheus.Collector{m.jobs} }

// New returns a Mounter. It does not connect yet: the D-Bus connection is made on first use and
// remade whenever it drops, so the plugin starts (and Check reports the problem) while systemd
// is unreachable.
func New(cfg Config) (*Mounter, error) {
	if cfg.SystemdSocket == "" || cfg.MountS3Path == "" || cfg.UmountPath == "" || cfg.StateDir == "" || cfg.StagingDir == "" {
		return nil, errors.New("systemd mounter: SystemdSocket, MountS3Path, UmountPath, StateDir and StagingDir are required")
	}
	return newMounter(cfg, dialPrivate(cfg.SystemdSocket)), nil
}

func newMounter(cfg Config, dial dialFunc) *Mounter {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.MountPath == "" {
		cfg.MountPath = "/bin/mount"
	}
	health := cfg.Health
	if health == nil {
		health = &mounthealth.Checker{}
	}
	return &Mounter{cfg: cfg, bus: &bus{dial: dial, dialTimeout: cfg.DialTimeout, callTimeout: cfg.CallTimeout}, health: health,
		jobs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "s3csi_node_systemd_job_seconds",
			Help:    "Time systemd took to run the node plugin's jobs, from the D-Bus call to the job's end, by operation (start: a mount-s3 unit with its bind mounts; stop), whatever their result.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}, []string{"operation"})}
}

// Close drops the D-Bus connection. Units keep running.
func (m *Mounter) Close() { m.bus.close() }

// Check reports whether systemd answers over D-Bus; it reconnects if needed.
func (m *Mounter) Check(ctx context.Context) error {
	return m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		_, err := c.SystemStateContext(ctx)
		return err
	})
}

// Mount implements mounter.Mounter. A live mount of the volume only gets its credentials
// refreshed; a dead one (mount-s3 gone or not answering) is unmounted and mounted again by a new
// unit, and Mount returns nil only once the new mount answers.
func (m *Mounter) Mount(ctx context.Context, req mounter.Request) error {
	dir := m.stateDir(req.Target)
	unit := MountUnitName(req.Target)
	r, err := m.health.Check(ctx, req.Target)
	if err != nil {
		return err
	}
	switch r.State {
	case mounthealth.Live:
		return m.remount(ctx, req, dir, r.Entry)
	case mounthealth.Foreign:
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount", mounter.ErrTargetInUse, req.Target, r.Entry.FsType, r.Entry.Source)
	case mounthealth.Dead:
		rec, err := readRecord(dir)
		if err == nil && (rec.VolumeID != req.VolumeID || rec.Bucket != req.Bucket) {
			return fmt.Errorf("%w: %s holds a dead mount of volume %q (bucket %q)", mounter.ErrTargetInUse, req.Target, rec.VolumeID, rec.Bucket)
		}
		if errors.Is(err, os.ErrNotExist) { // a dead mount of the 1.x driver: drop its units and files, then repair as ours
			olds, err := m.findLegacyUnits(ctx, req.Target)
			if err != nil {
				return err
			}
			for _, old := range olds {
				if err := m.forgetLegacy(ctx, old); err != nil {
					return err
				}
			}
		}
		klog.InfoS("Target holds a dead mount; mounting it again on top of it", "target", req.Target, "unit", unit, "cause", r.Cause)
		return m.repairStacked(ctx, m.newRecord(req), dir, unit)
	}
	createdTarget, err := mounter.PrepareTarget(req.Target)
	if err != nil {
		return err
	}
	err = m.start(ctx, req, dir, unit)
	if err != nil {
		// Clean up on a context that outlives a cancelled request.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := m.cleanupFailed(cctx, req.Target, dir, unit); cerr != nil {
			klog.ErrorS(cerr, "Cleanup after a failed mount", "unit", unit, "target", req.Target)
		}
		if createdTarget {
			if cerr := os.Remove(req.Target); cerr != nil && !errors.Is(cerr, os.ErrNotExist) {
				klog.ErrorS(cerr, "Cleanup after a failed mount could not remove the target", "target", req.Target)
			}
		}
	}
	return err
}

// cleanupFailed undoes a mount that failed half way: the unit is stopped, whatever it mounted
// (binds of a mount-s3 mount that never answered) is unmounted, and the state directory goes,
// unless the unit could not be stopped: the directory then stays so that a later unpublish
// finds it (HasLeftovers) and stops the unit.
func (m *Mounter) cleanupFailed(ctx context.Context, target, dir, unit string) error {
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	look := m.health.Lookup()
	r, err := look.Check(ctx, target)
	if err != nil {
		return err
	}
	if err := m.umountAll(ctx, target, dir, r, look); err != nil {
		return err
	}
	return m.removeState(dir)
}

// remount handles Mount on a target that already has a healthy mount: success (after a
// credential refresh) when it is this volume, ErrTargetInUse otherwise.
func (m *Mounter) remount(ctx context.Context, req mounter.Request, dir string, entry *mounttable.Entry) error {
	if !mounttable.IsMountS3(entry) {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount", mounter.ErrTargetInUse, req.Target, entry.FsType, entry.Source)
	}
	rec, err := readRecord(dir)
	if errors.Is(err, os.ErrNotExist) {
		return m.adoptLegacy(ctx, req) // a direct mount-s3 mount without a record: the 1.x driver's
	}
	if err != nil {
		return fmt.Errorf("%w: %s holds a mount-s3 mount this driver has no record of (%v)", mounter.ErrTargetInUse, req.Target, err)
	}
	if rec.VolumeID != req.VolumeID || rec.Bucket != req.Bucket {
		return fmt.Errorf("%w: %s already holds volume %q (bucket %q)", mounter.ErrTargetInUse, req.Target, rec.VolumeID, rec.Bucket)
	}
	if rec.ReadOnly != req.ReadOnly {
		return fmt.Errorf("%w: volume %q is already published at %s with read-only=%t", mounter.ErrTargetInUse, req.VolumeID, req.Target, rec.ReadOnly)
	}
	if args, _ := m.ownedPaths(req, dir, rec.RunAs); !slices.Equal(args, rec.Args) {
		klog.InfoS("Mount options changed; they apply from the next mount of this target", "target", req.Target, "volumeID", req.VolumeID)
	}
	if req.Credentials != nil {
		if _, err := m.writeCredentials(m.credDirOf(rec, dir), *req.Credentials, rec.RunAs); err != nil {
			return fmt.Errorf("refresh credentials: %w", err)
		}
		klog.V(4).InfoS("Refreshed credentials of a live mount", "target", req.Target, "volumeID", req.VolumeID)
	}
	return nil
}

// start launches the mount unit for a target that holds no mount-s3 mount and waits until
// mount-s3's mount answers. The caller cleans up when it fails.
func (m *Mounter) start(ctx context.Context, req mounter.Request, dir, unit string) error {
	// A unit left by an interrupted publish (plugin killed mid-way) must go first, and so must
	// its mount at the staging directory: the directory is removed next, and nothing may ever
	// recurse into a mount of the bucket.
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := m.umountAll(ctx, req.Target, dir, mounthealth.Result{}, nil); err != nil {
		return err
	}
	if err := m.removeState(dir); err != nil {
		return fmt.Errorf("reset state directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	user := m.mountUser(ctx)
	env := slices.Clone(req.Env)
	if req.CABundle != nil {
		p, err := m.writeCABundle(dir, req.CABundle, user)
		if err != nil {
			return fmt.Errorf("write CA bundle: %w", err)
		}
		env = append(env, "AWS_CA_BUNDLE="+p)
	}
	if req.Credentials != nil {
		credEnv, err := m.writeCredentials(m.credDir(dir), *req.Credentials, user)
		if err != nil {
			return fmt.Errorf("write credentials: %w", err)
		}
		env = append(env, credEnv...)
	}
	req.Args = req.Args.BoundCache(m.cfg.MaxCacheMiB)
	rec := m.newRecord(req)
	rec.RunAs = user
	var owned []string
	rec.Args, owned = m.ownedPaths(req, dir, user)
	for _, name := range owned {
		if name != "cache" {
			return fmt.Errorf("the %s option names a directory the driver does not know how to own", name)
		}
		if err := makeOwnedDir(m.cacheDir(dir, user), user); err != nil {
			return fmt.Errorf("create the %s directory: %w", name, err)
		}
	}
	rec.Env = env
	if err := m.saveRecord(dir, rec); err != nil {
		return err
	}
	klog.V(4).InfoS("Starting mount unit", "unit", unit, "target", req.Target, "bucket", req.Bucket, "args", rec.Args)
	return m.startRecorded(ctx, rec, dir, unit, true) // umountAll above emptied and removed it
}

// newRecord is the record of req (its environment is completed by start, which writes the
// credential files the environment points at).
func (m *Mounter) newRecord(req mounter.Request) record {
	return record{VolumeID: req.VolumeID, Bucket: req.Bucket, Target: req.Target, ReadOnly: req.ReadOnly, Args: req.Args.List(),
		WorkloadPodUID: req.WorkloadPodUID, WorkloadPodName: req.WorkloadPodName, WorkloadNamespace: req.WorkloadNamespace,
		PVName: req.PVName, Recovery: req.Recovery, Resources: resourcesOf(req.Resources)}
}

// startRecorded starts the mount unit of a recorded mount on a target that holds no live
// mount-s3 mount: nothing, a dead mount-s3 mount (a repair), or the guard of an earlier release
// (mounttable.GuardSource). mount-s3 refuses a mount point that already is one ("is already
// mounted"), so it never mounts at the target itself: it mounts at the staging directory (with
// the descriptor hand-over, scality-fuse-helper mounts there and mount-s3 serves it), and the
// unit (ExecStartPost) makes that mount private (the helper already did) and binds it onto the
// target twice, on top of whatever is there.
//   - Twice: one unmount under the workload (a cleanup script, a container runtime) leaves the
//     bucket served rather than the node's disk. Both binds read the same in the mount table:
//     systemd keeps one mount unit per path, and two different mounts there (the tmpfs guard of
//     earlier releases under one bind) made it announce every target's unit at every mount
//     change on the node (ADR 0008).
//   - Private first: a bind of a mount in a shared peer group joins that group, so the second
//     bind, mounted on the first, would propagate back onto the staging directory.
//   - On top: a dead mount stays below until the unpublish, since running containers hold copies
//     of it, and a mount on top propagates into those whose volumeMount has HostToContainer
//     propagation, which then see the live mount without a restart (unmounting it first would
//     remove their copies instead).
//
// With the hand-over the helper makes both binds in one ExecStartPost command: systemd reads the
// node's whole mount table after each command that changed it before it starts the next, which
// at a thousand mounts cost tens of milliseconds per command.
//
// A mount left at the staging directory by an earlier start (dead now, or never bound) is
// unmounted first: only its binds matter. stagingGone says the caller has just unmounted
// everything there and removed the directory (no need to read the mount table for it).
func (m *Mounter) startRecorded(ctx context.Context, rec record, dir, unit string, stagingGone bool) error {
	var pre [][]string
	staging := m.stagingDir(rec.Target)
	hand := m.useHandover(ctx)
	if rec.RunAs != nil && !hand {
		// Its files are its user's; as root without the hand-over's helper it could not mount.
		return fmt.Errorf("%w: the mount at %s runs mount-s3 as user %s, which needs the descriptor hand-over, and systemd's version could not be read", mounter.ErrUnavailable, rec.Target, rec.RunAs.Name)
	}
	protect := hand && m.cfg.ProtectSystem
	mounted := 0
	if !stagingGone {
		var err error
		if mounted, err = m.mountedAt(staging); err != nil {
			return err
		}
	}
	if mounted > 0 {
		for range mounted {
			if protect {
				// umount(8) would only unmount the unit's copy of the mount.
				pre = append(pre, []string{m.cfg.FuseHelperPath, "umount", "--in-manager-namespace", staging})
			} else {
				pre = append(pre, []string{m.cfg.UmountPath, "-f", "-l", staging})
			}
		}
	} else if err := os.MkdirAll(staging, 0o700); err != nil {
		return fmt.Errorf("create the staging directory: %w", err)
	}
	var post [][]string
	if hand {
		pre = append(pre, inManager(m.helperCommand(rec.Args, staging), protect)) // mounts, private, hands over
		post = append(post, inManager(m.helperBindCommand(staging, rec.Target, rec.ReadOnly), protect))
	} else {
		post = append(post, []string{m.cfg.MountPath, "--no-canonicalize", "--make-private", staging})
		for range 2 {
			post = append(post, []string{m.cfg.MountPath, "--no-canonicalize", "--bind", staging, rec.Target})
			if rec.ReadOnly {
				post = append(post, []string{m.cfg.MountPath, "--no-canonicalize", "-o", "remount,bind,ro", rec.Target})
			}
		}
	}
	return m.startUnit(ctx, rec, dir, unit, staging, pre, post, hand, protect)
}

// repairStacked replaces the dead mount-s3 mount at rec.Target by a new one stacked on top of
// it (see startRecorded). The old daemon is killed first: a hung one would keep its connection
// alive.
func (m *Mounter) repairStacked(ctx context.Context, rec record, dir, unit string) error {
	if prev, err := readRecord(dir); err == nil {
		// The same volume (Mount checked): started again as recorded, with the options, the
		// environment and the user its files (credentials, cache) were made for.
		if len(rec.Env) == 0 {
			rec.Env = prev.Env
		}
		rec.Args, rec.RunAs = prev.Args, prev.RunAs
	}
	m.killUnit(ctx, unit)
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if err := m.saveRecord(dir, rec); err != nil {
		return err
	}
	return m.startRecorded(ctx, rec, dir, unit, false)
}

// mountedAt counts the mounts at path.
func (m *Mounter) mountedAt(path string) (int, error) {
	entries, err := m.health.Table.List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if e.MountPoint == path {
			n++
		}
	}
	return n, nil
}

// killUnit sends SIGKILL to every process of a unit (nothing when it is not loaded).
func (m *Mounter) killUnit(ctx context.Context, unit string) {
	_ = m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		c.KillUnitContext(ctx, unit, int32(9))
		return nil
	})
}

// startUnit starts rec's mount unit with mount-s3 mounting at mountpoint (or, with hand, serving
// the connection scality-fuse-helper mounted there), the pre and post commands around it, and
// checks that the mount at the target answers.
func (m *Mounter) startUnit(ctx context.Context, rec record, dir, unit, mountpoint string, pre, post [][]string, hand, protect bool) error {
	argv := append(append([]string{m.cfg.MountS3Path}, rec.Args...), rec.Bucket, mountpoint)
	if hand {
		argv = append(append([]string{m.cfg.MountS3Path}, handoverArgs(rec.Args)...), rec.Bucket, fmt.Sprintf("/dev/fd/%d", handoverFD))
	}
	spec := unitSpec{
		description: fmt.Sprintf("mount-s3 for S3 CSI volume %s at %s", rec.VolumeID, rec.Target),
		kind:        "forking",
		handover:    hand,
		protect:     protect,
		user:        rec.RunAs,
		argv:        argv,
		env:         rec.Env,
		logFile:     filepath.Join(dir, logFileName),
		timeout:     m.cfg.StartTimeout,
		pre:         pre,
		post:        post,
		slice:       Slice,
		resources:   rec.Resources,
		keepFailed:  true,
	}
	_ = os.Remove(spec.logFile) // the output of this start only
	result, err := m.runUnit(ctx, unit, spec)
	if err != nil {
		return err
	}
	output := tail(spec.logFile, 4096)
	if result != "done" {
		if output == "" {
			// Nothing from mount-s3: the unit failed before it ran (the spawn) or after it
			// (a bind) or mount-s3 died silently; only the manager's journal says which.
			output = fmt.Sprintf("(mount-s3 printed nothing; the node's systemd journal for unit %s says why the unit failed)", unit)
		}
		return fmt.Errorf("%w: mounting bucket %q at %s (unit %s, job %s): %s%s", mounter.ErrMountFailed, rec.Bucket, rec.Target, unit, result, output, mounter.Hint(output))
	}
	r, err := m.health.Check(ctx, rec.Target)
	if err != nil {
		return err
	}
	if r.State != mounthealth.Live {
		return fmt.Errorf("%w: mount-s3 reported success but the mount at %s is %s (%v): %s", mounter.ErrMountFailed, rec.Target, r.State, r.Cause, orNoOutput(output))
	}
	klog.V(2).InfoS("Mounted", "unit", unit, "target", rec.Target, "bucket", rec.Bucket, "volumeID", rec.VolumeID)
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
	c, err := m.bus.get(ctx)
	if err != nil {
		return "", err
	}
	ch := make(chan string, 1)
	start := time.Now()
	if err := m.bus.bounded(ctx, func(ctx context.Context) error {
		_, err := c.StartTransientUnitContext(ctx, name, "fail", spec.properties(), ch)
		return err
	}); err != nil {
		return "", fmt.Errorf("start unit %s: %w", name, err)
	}
	res, err := waitJob(ctx, c, ch)
	m.jobs.WithLabelValues("start").Observe(time.Since(start).Seconds())
	if err != nil {
		return "", fmt.Errorf("wait for unit %s: %w", name, err)
	}
	return res, nil
}

// stopUnit stops a unit and waits for it to be gone; a unit that is not loaded is fine. It
// first lists loaded units by name, which (unlike StopUnit on an unknown name) does not make
// systemd search the disk for a unit file: the common case, no unit, stays cheap.
func (m *Mounter) stopUnit(ctx context.Context, name string) error {
	return m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		loaded, err := c.ListUnitsByPatternsContext(ctx, nil, []string{name})
		if err != nil {
			return fmt.Errorf("list unit %s: %w", name, err)
		}
		if len(loaded) == 0 {
			return nil
		}
		if loaded[0].ActiveState == "failed" {
			m.noteEnding(ctx, c, name)
		}
		ch := make(chan string, 1)
		start := time.Now()
		m.units.stopBegins(name)
		defer m.units.stopEnds(name)
		if _, err := c.StopUnitContext(ctx, name, "replace", ch); err != nil {
			if isNoSuchUnit(err) {
				return nil
			}
			return fmt.Errorf("stop unit %s: %w", name, err)
		}
		_, err = waitJob(ctx, c, ch)
		m.jobs.WithLabelValues("stop").Observe(time.Since(start).Seconds())
		if err != nil {
			return fmt.Errorf("stop unit %s: %w", name, err)
		}
		// A mount unit that failed stays loaded until now (how it ended was read above).
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

// Unmount implements mounter.Mounter: every mount of ours at target (mount-s3's binds, forced
// when dead, and an earlier release's guard) is unmounted, the unit stopped, the state
// directory removed, and the target directory too when empty. A mount of anything else is
// refused and left alone.
func (m *Mounter) Unmount(ctx context.Context, target string) error {
	dir := m.stateDir(target)
	unit := MountUnitName(target)
	look := m.health.Lookup() // at most one read of the table for the target and the staging directories
	r, err := look.Check(ctx, target)
	if err != nil {
		return err
	}
	if r.State == mounthealth.Foreign && len(r.Ours) == 0 {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount; not unmounting it", mounter.ErrTargetInUse, target, r.Entry.FsType, r.Entry.Source)
	}
	var olds []legacyUnit // the 1.x driver's units, for a mount of its without a record of ours
	if _, recErr := readRecord(dir); errors.Is(recErr, os.ErrNotExist) && len(r.Ours) > 0 && mounttable.IsMountS3(&r.Ours[0]) {
		if olds, err = m.findLegacyUnits(ctx, target); err != nil {
			return err
		}
	}
	// mount-s3 exits once its mounts are gone, before its unit is stopped: that is this stop's
	// doing too, not a death to look at.
	m.units.stopBegins(unit)
	defer m.units.stopEnds(unit)
	if err := m.umountAll(ctx, target, dir, r, look); err != nil {
		return err
	}
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	m.endings.take(unit) // nobody asks how a mount that is going ended
	for _, old := range olds {
		if err := m.forgetLegacy(ctx, old); err != nil {
			return err
		}
	}
	if err := m.removeState(dir); err != nil {
		return fmt.Errorf("remove state directory: %w", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Never remove anything recursively from a target; a non-empty directory is left as is.
		klog.InfoS("Target directory not removed", "target", target, "err", err)
	}
	klog.V(2).InfoS("Unmounted", "unit", unit, "target", target)
	return nil
}

// umountAll unmounts everything of ours for target in one oneshot unit: the mounts r.Ours at
// the target (its Check result), top first, then mount-s3's mounts at the staging directories
// (this release's and earlier releases'), so that mount-s3 exits; then it removes the (empty)
// staging directory. Nothing runs when no path holds a mount of ours. The staging directories
// are looked up through look, the lookup r came from, when not nil (else each is checked on its
// own): at a thousand mounts each read of the table costs the kernel milliseconds.
func (m *Mounter) umountAll(ctx context.Context, target, dir string, r mounthealth.Result, look *mounthealth.Lookup) error {
	paths := []pathMounts{{target, r}}
	n := len(r.Ours)
	for _, p := range []string{m.stagingDir(target), oldStagingDir(dir)} {
		var s mounthealth.Result
		var err error
		if look != nil {
			s, err = look.Check(ctx, p)
		} else {
			s, err = m.health.Check(ctx, p)
		}
		if err != nil {
			return err
		}
		paths = append(paths, pathMounts{p, s})
		n += len(s.Ours)
	}
	if n > 0 {
		if err := m.umount(ctx, target, dir, paths); err != nil {
			return err
		}
	}
	if err := os.Remove(m.stagingDir(target)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the staging directory: %w", err)
	}
	return nil
}

// pathMounts is a path and what mounthealth found there.
type pathMounts struct {
	path string
	r    mounthealth.Result
}

// umount unmounts, path after path, the mounts of ours at each (r.Ours, top first) in the
// host's mount namespace through one oneshot unit named after target: one `umount` for each run
// of mounts with the same flags (appendUmount), forced (the FUSE connection aborted) for a
// mount-s3 mount not known to be live. Every command must succeed, and afterwards none of
// those mounts may remain.
func (m *Mounter) umount(ctx context.Context, target, dir string, paths []pathMounts) error {
	unit := umountUnitName(target)
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	var cmds [][]string
	var entries []mounttable.Entry
	for _, p := range paths {
		for _, e := range p.r.Ours {
			// Forced (the FUSE connection aborted: nothing waits on the daemon, and calls stuck
			// in it return) and lazy (a call still returning cannot make it busy) for a mount-s3
			// mount not known to be live: the top one's daemon did not answer, or a mount below
			// is of another file system (an earlier, dead mount-s3 under a repair's). A bind of
			// the live top's own file system is unmounted as the top is: forcing it would abort
			// the live connection before the staging mount's unmount lets mount-s3 finish.
			forced := mounttable.IsMountS3(&e) && (p.r.State != mounthealth.Live || !e.SameFileSystem(&p.r.Ours[0]))
			cmds = appendUmount(cmds, m.cfg.UmountPath, forced, p.path)
		}
		entries = append(entries, p.r.Ours...)
	}
	logFile := filepath.Join(dir, "umount.log")
	_ = os.Remove(logFile)
	spec := unitSpec{
		description: "unmount S3 CSI volume at " + target,
		kind:        "oneshot",
		argv:        cmds[0],
		more:        cmds[1:],
		logFile:     logFile,
		timeout:     30 * time.Second,
	}
	result, err := m.runUnit(ctx, unit, spec)
	if err != nil {
		return err
	}
	left, err := m.stillMounted(entries)
	if err != nil {
		return err
	}
	// The unit unmounts in systemd's mount namespace; the node plugin's view follows through
	// propagation. Give a lagging view a moment before calling it a failure (a loaded machine
	// was seen to need more than a second, once).
	for deadline := time.Now().Add(5 * time.Second); result == "done" && left > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if left, err = m.stillMounted(entries); err != nil {
			return err
		}
	}
	if result == "done" && left == 0 {
		return nil
	}
	if result == "done" {
		klog.InfoS("Unmount unit succeeded but mounts remain in the node plugin's view", "target", target, "unit", unit, "left", left, "mounts", entries)
	}
	return fmt.Errorf("unmount %s (unit %s, job %s, %d of %d mounts left): %s", target, unit, result, left, len(entries), orNoOutput(tail(logFile, 4096)))
}

// appendUmount adds path to the last umount(8) command of cmds when that one has the same
// flags, else a new command. umount(8) unmounts its arguments in order, each once (a path
// given twice unmounts the top two mounts there), and exits non-zero when any failed; it goes
// on after a failure, so a busy target keeps its mounts and the unit fails, while a later path
// (the staging directory) may be unmounted: mount-s3 then serves the target's binds until the
// next unpublish unmounts them, and exits.
//
// One command rather than one per mount: systemd handles the mount table's change before it
// starts a unit's next command, which at a thousand mounts costs tens of milliseconds per
// command (docs/development.md, "At scale").
func appendUmount(cmds [][]string, umount string, forced bool, path string) [][]string {
	head := []string{umount, "--"}
	if forced {
		head = []string{umount, "-f", "-l", "--"}
	}
	if n := len(cmds); n > 0 && len(cmds[n-1]) > len(head) && slices.Equal(cmds[n-1][:len(head)], head) {
		cmds[n-1] = append(cmds[n-1], path)
		return cmds
	}
	return append(cmds, append(head, path))
}

// stillMounted counts the entries that are still in the mount table (by mount id). When the
// kernel says none of their paths is a mount point any more, none is, without reading the table.
func (m *Mounter) stillMounted(entries []mounttable.Entry) (int, error) {
	if !slices.ContainsFunc(entries, func(e mounttable.Entry) bool {
		mounted, known := m.health.Table.Mounted(e.MountPoint)
		return mounted || !known
	}) {
		return 0, nil
	}
	all, err := m.health.Table.List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if slices.ContainsFunc(all, func(a mounttable.Entry) bool { return a.ID == e.ID }) {
			n++
		}
	}
	return n, nil
}

// Repair mounts target again when the mount this mounter made there is dead, or gone (nothing
// left, or only an earlier release's guard): what Mount does for a dead mount, from the
// mount's record instead of kubelet's request, so the node plugin can repair without waiting
// for kubelet. It reports whether it mounted; a live mount, or a target it has no record of,
// is left alone.
func (m *Mounter) Repair(ctx context.Context, target string) (bool, error) {
	dir := m.stateDir(target)
	rec, err := readRecord(dir)
	if err != nil {
		return false, nil // not ours, or unpublished meanwhile
	}
	r, err := m.health.Check(ctx, target)
	if err != nil {
		return false, err
	}
	if r.State == mounthealth.Absent && !r.Guarded {
		// Nothing mounted, so nothing on the path can hang: kubelet may have removed it.
		if _, err := os.Lstat(target); err != nil {
			return false, fmt.Errorf("target %s of volume %q is gone: %w", target, rec.VolumeID, err)
		}
	}
	switch r.State {
	case mounthealth.Live:
		return false, nil
	case mounthealth.Foreign:
		return false, fmt.Errorf("%w: %s holds a %s mount from %s", mounter.ErrTargetInUse, target, r.Entry.FsType, r.Entry.Source)
	case mounthealth.Dead:
		klog.InfoS("Repairing a dead mount", "target", target, "volumeID", rec.VolumeID, "cause", r.Cause)
		if err := m.repairStacked(ctx, rec, dir, MountUnitName(target)); err != nil {
			return false, err
		}
		return true, nil
	default:
		klog.InfoS("Repairing a mount that is gone", "target", target, "volumeID", rec.VolumeID)
		if err := m.stopUnit(ctx, MountUnitName(target)); err != nil {
			return false, err
		}
	}
	if err := m.startRecorded(ctx, rec, dir, MountUnitName(target), false); err != nil {
		return false, err
	}
	return true, nil
}

// Targets lists the targets this mounter has mounted (and not unmounted), from its records
// (recordCache: from memory between full scans of the state directory).
func (m *Mounter) Targets() []mounter.Target {
	now := time.Now()
	recs, ok := m.records.cached(now)
	if !ok {
		entries, err := os.ReadDir(m.cfg.StateDir)
		if err != nil {
			return nil
		}
		recs = make(map[string]record, len(entries))
		seen := make(map[string]bool, len(entries))
		for _, e := range entries {
			dir := filepath.Join(m.cfg.StateDir, e.Name())
			seen[dir] = true
			if rec, err := m.records.read(dir); err == nil {
				recs[dir] = rec
			}
		}
		m.records.scannedAt(seen, now)
	}
	out := make([]mounter.Target, 0, len(recs))
	for _, rec := range recs {
		if rec.Target != "" {
			out = append(out, mounter.Target{Path: rec.Target, VolumeID: rec.VolumeID, PVName: rec.PVName, Recovery: rec.Recovery,
				WorkloadPodUID: rec.WorkloadPodUID, WorkloadPodName: rec.WorkloadPodName, WorkloadNamespace: rec.WorkloadNamespace})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Recorded implements mounter.Repairer.
func (m *Mounter) Recorded(target string) bool {
	dir := m.stateDir(target)
	if recorded, known := m.records.has(dir, time.Now()); known {
		return recorded
	}
	_, err := m.records.read(dir)
	return err == nil
}

var _ mounter.Repairer = (*Mounter)(nil)

// WatchUnits makes changed run whenever a mount unit of this driver that was running stops
// running other than by the mounter's own stop (mount-s3 exited or was killed; see unitWatch)
// and whenever a new connection to systemd is made (systemd came back: its units may be gone),
// so a caller can check the mounts at once instead of at its next sweep. It reads the SubState
// carried by systemd's PropertiesChanged signals of the Unit interface, which systemd sends on
// its private socket for every unit: no call per signal (go-systemd's SubState subscriber
// reads every property of the unit back for each signal of any unit, a round trip per signal
// that grows with the node's unit churn), one listing of the running mount units per
// connection (the current one too, when WatchUnits comes after the Mounter's first calls).
func (m *Mounter) WatchUnits(changed func()) {
	m.bus.watchConnections(func(c dbusConn, gone <-chan struct{}) {
		updates := make(chan *sd.PropertiesUpdate, 256)
		errs := make(chan error, 16)
		c.SetPropertiesSubscriber(updates, errs)
		go func() {
			running := seed(c)
			for {
				select {
				case <-gone:
					return
				case err := <-errs:
					// A full channel: the monitor's periodic sweep covers what was missed.
					klog.V(4).InfoS("systemd unit state subscription", "err", err)
				case u := <-updates:
					if m.units.left(running, u) {
						changed()
					}
				}
			}
		}()
		changed()
	})
}
