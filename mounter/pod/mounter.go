// Package pod implements mounter.Mounter for pod mode: mount-s3 runs in a Mountpoint Pod that
// the controller created for the workload's volume on this node (recorded in a
// MountpointS3PodAttachment); the node plugin mounts FUSE itself and hands the file descriptor
// to the pod, then bind-mounts the shared mount into each workload's target.
//
// Per Mountpoint Pod mp (its name) on the host:
//   - <kubelet>/plugins/s3.csi.scality.com/mnt/<mp>: the shared FUSE mount ("source");
//   - <kubelet>/pods/<mpUID>/volumes/kubernetes.io~empty-dir/comm: the pod's /comm, holding
//     mount.sock (the pod listens), credentials/ (AWS profile files the node writes, readable by
//     the pod's group), mount.err (mount-s3's error output), mount.exit (the node asks the pod
//     to finish).
//
// Mount and the unmounter serialise per Mountpoint Pod.
package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/inflight"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// Config configures a pod-mode Mounter.
type Config struct {
	// KubeletPath is the kubelet root; the plugin sees it at the host path.
	KubeletPath string
	// Health judges mounts (default: a Checker with mounthealth's default deadline).
	Health *mounthealth.Checker
}

// Mounter mounts volumes through Mountpoint Pods.
type Mounter struct {
	paths   paths
	cluster mountpointPods
	health  *mounthealth.Checker
	kernel  kernel
	send    sendFunc
	// gid owns the credential files written for the Mountpoint Pods (mountpointGID).
	gid   int
	locks inflight.Set // per Mountpoint Pod
	// records are the target records, kept in memory.
	records *targetRecords
	// unbound is called with a Mountpoint Pod name after a workload's bind mount of it is gone,
	// so a pending needs-unmount can proceed without waiting for the next sweep.
	unbound func(mp string)
}

var _ mounter.Mounter = (*Mounter)(nil)

// New returns a pod-mode Mounter using cluster (started by the caller).
func New(cfg Config, cluster *Cluster) (*Mounter, error) {
	if cluster == nil {
		return nil, errors.New("pod mounter: a cluster is required")
	}
	return newMounter(cfg, cluster, hostKernel{}, mountoptions.Send)
}

func newMounter(cfg Config, cluster mountpointPods, k kernel, send sendFunc) (*Mounter, error) {
	if cfg.KubeletPath == "" {
		return nil, errors.New("pod mounter: the kubelet path is required")
	}
	health := cfg.Health
	if health == nil {
		health = &mounthealth.Checker{}
	}
	p := paths{kubelet: cfg.KubeletPath}
	return &Mounter{paths: p, cluster: cluster, health: health, kernel: k, send: send, gid: mountpointGID, records: &targetRecords{dir: p.targetRecords()}}, nil
}

// Check reports whether the informers are usable (Probe).
func (m *Mounter) Check(ctx context.Context) error {
	if _, err := m.cluster.MountpointPods(ctx); err != nil {
		return fmt.Errorf("%w: %v", mounter.ErrUnavailable, err)
	}
	return nil
}

// Mount implements mounter.Mounter: wait for the workload's Mountpoint Pod, refresh its
// credentials, mount FUSE at the pod's source and hand it over (first workload, or when the
// shared mount died), then bind-mount the source at the target (twice, see bindTarget).
// Idempotent; a dead bind (its Mountpoint Pod's mount-s3 died) is replaced; on failure the
// target is as it was and a source mount made by this call is undone.
func (m *Mounter) Mount(ctx context.Context, req mounter.Request) error {
	if req.WorkloadPodUID == "" || req.PVName == "" {
		return fmt.Errorf("%w: pod mode needs the workload pod UID and PV name (kubelet's target path layout or podInfoOnMount)", mounter.ErrInvalidRequest)
	}
	if err := mounter.CheckTarget(req.Target); err != nil {
		return err // before anything is made for the volume
	}
	waitCtx, cancel := withMargin(ctx, time.Second)
	defer cancel()
	pod, err := m.cluster.WaitForMountpointPod(waitCtx, req.WorkloadPodUID, req.PVName, req.VolumeID)
	if err != nil {
		return err
	}
	mp := pod.Name
	source := m.paths.source(mp)
	unlock, err := m.locks.Lock(ctx, mp)
	if err != nil {
		return err
	}
	defer unlock()

	comm := m.paths.comm(pod.UID)
	commDir, err := confined.Open(comm) // the Mountpoint Pod can write it: never follow what it left there
	if err != nil {
		return fmt.Errorf("open the comm directory of Mountpoint Pod %s: %w", mp, err)
	}
	defer commDir.Close()
	env := append([]string(nil), req.Env...)
	if req.CABundle != nil {
		if err := commDir.WriteFile(mounter.CABundleFile, req.CABundle, 0o644, -1); err != nil {
			return fmt.Errorf("write CA bundle for Mountpoint Pod %s: %w", mp, err)
		}
		env = append(env, "AWS_CA_BUNDLE="+filepath.Join(podCommDir, mounter.CABundleFile))
	}
	if req.Credentials != nil {
		credEnv, err := credentials.WriteProfileIn(commDir, commCredentials, filepath.Join(podCommDir, commCredentials), *req.Credentials, m.gid)
		if err != nil {
			return fmt.Errorf("write credentials for Mountpoint Pod %s: %w", mp, err)
		}
		env = append(env, credEnv...)
	}
	args := fdArgs(req.Args)
	src := sourceRecord{Bucket: req.Bucket, Args: args.List(), Env: env, ReadOnly: req.VolumeReadOnly}
	look, err := m.ensureSource(ctx, pod, source, comm, src)
	if err != nil {
		return err
	}
	if err := writeJSON(m.paths.sourceRecord(mp), src); err != nil {
		return err
	}
	return m.bindTarget(ctx, source, look, targetRecord{Target: req.Target, MountpointPod: mp, VolumeID: req.VolumeID, ReadOnly: req.ReadOnly,
		WorkloadPodUID: req.WorkloadPodUID, WorkloadPodName: req.WorkloadPodName, WorkloadNamespace: req.WorkloadNamespace,
		PVName: req.PVName, Recovery: req.Recovery})
}

// fdArgs are the options mount-s3 gets with the FUSE fd the node plugin mounted
// (CONFORMANCE.md, rows M5 and A1-A4):
//   - no --read-only and no --auto-unmount: mount-s3 refuses both with a fd mount point, as they
//     belong to the mount(2) call. A read-only volume's shared mount is MS_RDONLY instead
//     (sourceRecord.ReadOnly); workloads that publish read-only get read-only binds;
//   - --allow-root unless --allow-other is set: mount-s3 runs as its own user, and without either
//     its FUSE session answers that user only, so root (the node plugin's checks, kubelet, root
//     containers) would get EACCES. The mount then carries allow_other, and mount-s3 narrows it
//     to root and itself.
func fdArgs(requested mountargs.Args) mountargs.Args {
	args := requested.Clone()
	args.Remove("read-only")
	args.Remove("auto-unmount")
	if !args.Has("allow-other") {
		args.Set("allow-root", "")
	}
	return args
}

// bindTarget makes rec.Target two binds of source, stacked: nothing to do when it already
// holds one; a dead bind is covered by two new ones. Two, so that one unmount under the
// workload leaves the bucket served rather than the node's disk; and two binds of one mount
// read the same in the mount table, where the tmpfs guard of earlier releases under one bind
// made systemd announce every target's mount unit at every mount change on the node (ADR
// 0008). An earlier release's guard at the target stays under the new binds until the
// unpublish. look, when not nil, is a lookup begun since the caller took the target's lock and
// before any mount change of its own at the target: the target is looked up through it, so
// that a publish reads the mount table at most once (at thousands of mounts each read costs
// milliseconds of the kernel's time), and not at all where the kernel can say (Linux 6.13).
func (m *Mounter) bindTarget(ctx context.Context, source string, look *mounthealth.Lookup, rec targetRecord) error {
	target := rec.Target
	if look == nil {
		look = m.health.Lookup()
	}
	r, err := look.Check(ctx, target)
	if err != nil {
		return err
	}
	switch r.State {
	case mounthealth.Live:
		binds, err := bindsOf(m.health.Table, source, m.paths.pods())
		if err != nil {
			return err
		}
		if !slices.Contains(binds, target) {
			holder := "a volume this node plugin has no record of"
			if old, ok := m.records.get(m.paths.targetRecord(target)); ok {
				holder = fmt.Sprintf("volume %q (Mountpoint Pod %s)", old.VolumeID, old.MountpointPod)
			}
			return fmt.Errorf("%w: %s already holds %s, not volume %q of Mountpoint Pod %s", mounter.ErrTargetInUse, target, holder, rec.VolumeID, rec.MountpointPod)
		}
		return m.records.save(m.paths.targetRecord(target), rec) // already published: credentials refreshed
	case mounthealth.Foreign:
		return fmt.Errorf("%w: %s holds a %s mount from %s", mounter.ErrTargetInUse, target, r.Entry.FsType, r.Entry.Source)
	case mounthealth.Dead:
		// The new bind goes on top of the dead one, which stays until the unpublish: running
		// containers hold copies of the dead mount, and a mount stacked on it propagates into
		// those whose volumeMount has HostToContainer propagation, which then see the live mount
		// without a restart. Unmounting the dead one first would remove their copies instead.
		klog.InfoS("Target holds a dead mount; binding the shared mount again on top of it", "target", target, "mountpointPod", rec.MountpointPod, "cause", r.Cause)
	}
	created, err := mounter.PrepareTarget(target)
	if err != nil {
		return err
	}
	// Two binds (see bindTarget's doc); the first goes when the second fails.
	if err := m.kernel.Bind(source, target, rec.ReadOnly); err != nil {
		if created {
			os.Remove(target)
		}
		return err
	}
	if err := m.kernel.Bind(source, target, rec.ReadOnly); err != nil {
		if uerr := m.kernel.Unmount(target, plain); uerr != nil {
			klog.ErrorS(uerr, "Cleanup after a failed bind could not unmount the first bind", "target", target)
		} else if created {
			os.Remove(target)
		}
		return err
	}
	if err := m.records.save(m.paths.targetRecord(target), rec); err != nil {
		return err
	}
	klog.V(2).InfoS("Published through Mountpoint Pod", "target", target, "mountpointPod", rec.MountpointPod, "volumeID", rec.VolumeID)
	return nil
}

// ensureSource makes sure the Mountpoint Pod serves the bucket at source: nothing to do when it
// already does; otherwise (no mount yet, or a dead one: the pod's mount-s3 died) mount FUSE,
// send the options and the fd, and wait until mount-s3 answers (or reports an error in
// mount.err). It returns the lookup it made (mounthealth.Lookup): where it had to read the
// mount table, that read is current for every path but source.
func (m *Mounter) ensureSource(ctx context.Context, pod *corev1.Pod, source, comm string, src sourceRecord) (*mounthealth.Lookup, error) {
	look := m.health.Lookup()
	r, err := look.Check(ctx, source)
	if err != nil {
		return nil, err
	}
	switch r.State {
	case mounthealth.Live:
		return look, nil // nothing mounted since: bindTarget may look the target up through it
	case mounthealth.Dead:
		klog.InfoS("Shared mount is dead, handing a new one to the Mountpoint Pod", "source", source, "mountpointPod", pod.Name, "cause", r.Cause)
		if err := m.unmountSource(ctx, source); err != nil {
			return nil, err
		}
	case mounthealth.Foreign:
		return nil, fmt.Errorf("%w: %s holds a %s mount from %s", mounter.ErrTargetInUse, source, r.Entry.FsType, r.Entry.Source)
	}
	if err := os.MkdirAll(source, 0o750); err != nil {
		return nil, fmt.Errorf("create source directory: %w", err)
	}
	if d, err := confined.Open(comm); err == nil {
		_ = d.Remove(commError)
		d.Close()
	}
	errWatch, err := watchFile(comm, commError)
	if err != nil {
		return nil, err
	}
	defer errWatch.Close()
	allowOther := slices.ContainsFunc(src.Args, func(a string) bool { return a == "--allow-other" || a == "--allow-root" })
	fuse, err := m.kernel.MountFUSE(source, allowOther, src.ReadOnly)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			if err := m.unmountSource(context.WithoutCancel(ctx), source); err != nil {
				klog.ErrorS(err, "Cleanup of a failed shared mount", "source", source)
			}
		}
	}()
	start := time.Now()
	sendErr := m.send(ctx, filepath.Join(comm, commSocket), mountoptions.Options{BucketName: src.Bucket, Args: src.Args, Env: src.Env}, int(fuse.Fd()))
	fuse.Close() // the pod holds its own copy now (or never will)
	if sendErr != nil {
		return nil, fmt.Errorf("hand the mount over to Mountpoint Pod %s: %w", pod.Name, sendErr)
	}
	if err := m.waitServed(ctx, source, errWatch); err != nil {
		return nil, fmt.Errorf("%w: Mountpoint Pod %s: %s%s", mounter.ErrMountFailed, pod.Name, err, mounter.Hint(err.Error()))
	}
	ok = true
	klog.V(2).InfoS("Mountpoint Pod serves the bucket", "mountpointPod", pod.Name, "bucket", src.Bucket, "source", source, "duration", time.Since(start))
	// Mounted since the lookup began, but at source only: a read of the table it made still
	// tells what the target holds (the caller holds the target's lock), so bindTarget need not
	// read the table again.
	return look, nil
}

// waitServed waits until the FUSE mount at source answers (mount-s3 took it over) or the pod
// writes mount.err.
func (m *Mounter) waitServed(ctx context.Context, source string, errWatch *fileWatch) error {
	served := make(chan error, 1)
	go func() { served <- m.kernel.Answer(source) }()
	select {
	case err := <-served:
		if err == nil {
			return nil
		}
		// The pod writes mount.err before its end drops the connection; prefer its text.
		select {
		case text := <-errWatch.appeared:
			return errors.New(strings.TrimSpace(text))
		case <-time.After(time.Second):
		}
		return fmt.Errorf("the mount does not answer: %v", err)
	case text := <-errWatch.appeared:
		return errors.New(strings.TrimSpace(text))
	case <-ctx.Done():
		return fmt.Errorf("mount-s3 did not take the mount over before the deadline: %w", ctx.Err())
	}
}

// unmountSource removes a shared FUSE mount, also when no daemon serves it anymore: a mount
// whose daemon does not answer is unmounted with MNT_FORCE, which aborts its FUSE connection
// first, so nothing waits on it. The plugin's own other views of it go too. The source
// directory is the driver's own, so whatever else is mounted there (a leftover) goes as well.
func (m *Mounter) unmountSource(ctx context.Context, source string) error {
	r, err := m.health.Check(ctx, source)
	if err != nil {
		return err
	}
	entries, err := m.health.Table.List()
	if err != nil {
		return err
	}
	var stack []mounttable.Entry // top first
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == source {
			stack = append(stack, entries[i])
		}
	}
	for i, e := range stack {
		if i == 0 && mounttable.IsMountS3(&e) {
			m.unmountOwnCopies(source, &e)
		}
		how := plain
		if mounttable.IsMountS3(&e) && (i != 0 || r.State != mounthealth.Live) {
			how = abort
		}
		if err := m.kernel.Unmount(source, how); err != nil {
			if err := m.kernel.Unmount(source, detach); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(source); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove source directory: %w", err)
	}
	return nil
}

// unmountOwnCopies detaches the other views of a shared mount that exist in the plugin's own
// mount namespace and are not workload binds: after a restart, the plugin container sees the
// shared mount again below /csi (its recursive bind of the plugin directory). Left in place,
// such a copy keeps the directory busy (rmdir fails EBUSY) and the FUSE connection alive.
func (m *Mounter) unmountOwnCopies(source string, entry *mounttable.Entry) {
	entries, err := m.health.Table.List()
	if err != nil {
		return
	}
	pods := m.paths.pods() + "/"
	for _, e := range entries {
		if e.SameFileSystem(entry) && e.MountPoint != source && !strings.HasPrefix(e.MountPoint, pods) {
			if err := m.kernel.Unmount(e.MountPoint, detach); err != nil {
				klog.ErrorS(err, "Detaching a copy of a shared mount", "source", source, "copy", e.MountPoint)
			} else {
				klog.V(2).InfoS("Detached a copy of a shared mount", "source", source, "copy", e.MountPoint)
			}
		}
	}
}

// Unmount implements mounter.Mounter: it removes only the workload's bind mounts and an earlier
// release's guard below them (and the empty target directory); the shared mount stays for the
// other workloads until the controller retires the Mountpoint Pod. A mount of anything else is
// refused.
func (m *Mounter) Unmount(ctx context.Context, target string) error {
	r, err := m.health.Check(ctx, target)
	if err != nil {
		return err
	}
	if r.State == mounthealth.Foreign && len(r.Ours) == 0 {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount; not unmounting it", mounter.ErrTargetInUse, target, r.Entry.FsType, r.Entry.Source)
	}
	rec, recorded := m.records.get(m.paths.targetRecord(target))
	mp := m.sourceOf(r.Entry, rec.MountpointPod)
	if mp == "" && recorded {
		mp = rec.MountpointPod
	}
	for range r.Ours {
		// A bind is never unmounted with MNT_FORCE: that would abort the connection the other
		// workloads of the shared mount use.
		if err := m.kernel.Unmount(target, plain); err != nil {
			if err := m.kernel.Unmount(target, detach); err != nil {
				return err
			}
		}
	}
	m.records.remove(m.paths.targetRecord(target))
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.InfoS("Target directory not removed", "target", target, "err", err)
	}
	if mp != "" && m.unbound != nil {
		m.unbound(mp)
	}
	return nil
}

// sourceOf returns the Mountpoint Pod whose shared mount entry is a bind of ("" if none):
// recorded, the one the target's record names, when its shared mount is that file system (the
// kernel says, mounttable.Table.At), else the one the mount table shows.
func (m *Mounter) sourceOf(entry *mounttable.Entry, recorded string) string {
	if entry == nil || !mounttable.IsMountS3(entry) {
		return ""
	}
	if recorded != "" {
		if stack, known := m.health.Table.At(m.paths.source(recorded)); known {
			if n := len(stack); n > 0 && stack[n-1].SameFileSystem(entry) {
				return recorded
			}
		}
	}
	snap, err := m.health.Snapshot()
	if err != nil {
		klog.ErrorS(err, "Looking up the shared mount of a target")
		return ""
	}
	root := m.paths.sourceRoot() + "/"
	for path, entries := range snap {
		if !strings.HasPrefix(path, root) {
			continue
		}
		for _, e := range entries {
			if e.SameFileSystem(entry) {
				return strings.TrimPrefix(path, root)
			}
		}
	}
	return ""
}

// Repair binds target again when its mount is dead (its Mountpoint Pod's mount-s3 died) or
// gone, handing a new shared mount to the Mountpoint Pod first when that one is dead too: what
// Mount does, from the records of the last publish instead of kubelet's request (the
// credentials are still in the pod's comm directory). It reports whether it mounted; a live
// target, or one it has no record of, is left alone. It needs the Mountpoint Pod Running (a
// restarted container serves again); a Mountpoint Pod that was replaced needs kubelet's
// republish (new credentials). A restarted container that is not listening yet makes the
// hand-over fail: the monitor tries again.
func (m *Mounter) Repair(ctx context.Context, target string) (bool, error) {
	rec, ok := m.records.get(m.paths.targetRecord(target))
	if !ok {
		return false, nil
	}
	r, err := m.health.Check(ctx, target)
	if err != nil || r.State == mounthealth.Live {
		return false, err
	}
	pod, err := m.cluster.MountpointPod(ctx, rec.MountpointPod)
	if err != nil {
		return false, err
	}
	if pod == nil || phaseOf(pod) != corev1.PodRunning {
		return false, fmt.Errorf("%w: Mountpoint Pod %s is not serving yet", mounter.ErrUnavailable, rec.MountpointPod)
	}
	var src sourceRecord
	if err := readJSON(m.paths.sourceRecord(rec.MountpointPod), &src); err != nil {
		return false, fmt.Errorf("no record of Mountpoint Pod %s's mount: %w", rec.MountpointPod, err)
	}
	if missing := m.missingCommFiles(pod, src); missing != "" {
		// A new comm directory (the node rebooted: the emptyDir is a tmpfs): handing over now
		// would make mount-s3 fail for lack of them; kubelet's publish brings them.
		return false, fmt.Errorf("%w: Mountpoint Pod %s no longer has %s (a new comm directory, after a node reboot): kubelet's next publish of the volume writes it again", mounter.ErrUnavailable, rec.MountpointPod, missing)
	}
	unlock, err := m.locks.Lock(ctx, rec.MountpointPod)
	if err != nil {
		return false, err
	}
	defer unlock()
	source := m.paths.source(rec.MountpointPod)
	look, err := m.ensureSource(ctx, pod, source, m.paths.comm(pod.UID), src)
	if err != nil {
		return false, err
	}
	if err := m.bindTarget(ctx, source, look, rec); err != nil {
		return false, err
	}
	return true, nil
}

// missingCommFiles returns the first file of the pod's comm directory that src's environment
// points mount-s3 at (credentials, CA bundle) and that is not there, or "".
func (m *Mounter) missingCommFiles(pod *corev1.Pod, src sourceRecord) string {
	comm, err := confined.Open(m.paths.comm(pod.UID))
	if err != nil {
		return podCommDir
	}
	defer comm.Close()
	for _, kv := range src.Env {
		_, v, _ := strings.Cut(kv, "=")
		if rel, ok := strings.CutPrefix(v, podCommDir+"/"); ok && !comm.HasFile(rel) {
			return v
		}
	}
	return ""
}

// Targets lists the targets this mounter has published (and not unpublished), from its records
// (kept in memory between full scans, targetRecords).
func (m *Mounter) Targets() []mounter.Target {
	recs := m.records.list()
	out := make([]mounter.Target, 0, len(recs))
	for _, rec := range recs {
		out = append(out, mounter.Target{Path: rec.Target, VolumeID: rec.VolumeID, PVName: rec.PVName, Recovery: rec.Recovery,
			WorkloadPodUID: rec.WorkloadPodUID, WorkloadPodName: rec.WorkloadPodName, WorkloadNamespace: rec.WorkloadNamespace})
	}
	return out
}

// SharingMount lists the other published targets of target's Mountpoint Pod: they show the same
// shared mount (mountmonitor.Sharer).
func (m *Mounter) SharingMount(target string) []string {
	rec, ok := m.records.get(m.paths.targetRecord(target))
	if !ok {
		return nil
	}
	var out []string
	for _, other := range m.records.list() {
		if other.Target != target && other.MountpointPod == rec.MountpointPod {
			out = append(out, other.Target)
		}
	}
	return out
}

// Recorded implements mounter.Repairer.
func (m *Mounter) Recorded(target string) bool {
	_, ok := m.records.get(m.paths.targetRecord(target))
	return ok
}

var _ mounter.Repairer = (*Mounter)(nil)

// withMargin returns ctx shortened by margin when it has a deadline, so a wait that times out
// still leaves time to report why.
func withMargin(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*margin {
		return context.WithDeadline(ctx, dl.Add(-margin))
	}
	return context.WithCancel(ctx)
}
