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
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// Config configures a pod-mode Mounter.
type Config struct {
	// KubeletPath is the kubelet root; the plugin sees it at the host path.
	KubeletPath string
}

// Mounter mounts volumes through Mountpoint Pods.
type Mounter struct {
	paths   paths
	cluster *Cluster
	table   mounttable.Table
	locks   keyedMutex
	// unbound is called with a Mountpoint Pod name after a workload's bind mount of it is gone,
	// so a pending needs-unmount can proceed without waiting for the next sweep.
	unbound func(mp string)
}

var _ mounter.Mounter = (*Mounter)(nil)

// New returns a pod-mode Mounter using cluster (started by the caller).
func New(cfg Config, cluster *Cluster) (*Mounter, error) {
	if cfg.KubeletPath == "" || cluster == nil {
		return nil, errors.New("pod mounter: kubelet path and cluster are required")
	}
	return &Mounter{paths: paths{kubelet: cfg.KubeletPath}, cluster: cluster}, nil
}

// Check reports whether the informers are usable (Probe).
func (m *Mounter) Check(ctx context.Context) error {
	if _, err := m.cluster.mountpointPods(ctx); err != nil {
		return fmt.Errorf("%w: %v", mounter.ErrUnavailable, err)
	}
	return nil
}

// Mount implements mounter.Mounter: wait for the workload's Mountpoint Pod, refresh its
// credentials, mount FUSE at the pod's source and hand it over (first workload only), then
// bind-mount the source at the target. Idempotent; on failure the target is as it was and a
// source mount made by this call is undone.
func (m *Mounter) Mount(ctx context.Context, req mounter.Request) error {
	if req.WorkloadPodUID == "" || req.PVName == "" {
		return fmt.Errorf("%w: pod mode needs the workload pod UID and PV name (kubelet's target path layout or podInfoOnMount)", mounter.ErrInvalidRequest)
	}
	state, entry, err := m.table.Inspect(req.Target)
	if err != nil {
		return err
	}
	waitCtx, cancel := withMargin(ctx, time.Second)
	defer cancel()
	pod, err := m.cluster.WaitForMountpointPod(waitCtx, req.WorkloadPodUID, req.PVName, req.VolumeID)
	if err != nil {
		return err
	}
	mp := pod.Name
	source := m.paths.source(mp)
	unlock := m.locks.lock(mp)
	defer unlock()

	comm := m.paths.comm(pod.UID)
	env := append([]string(nil), req.Env...)
	if req.CABundle != nil {
		if err := os.WriteFile(filepath.Join(comm, mounter.CABundleFile), req.CABundle, 0o644); err != nil {
			return fmt.Errorf("write CA bundle for Mountpoint Pod %s: %w", mp, err)
		}
		env = append(env, "AWS_CA_BUNDLE="+filepath.Join(podCommDir, mounter.CABundleFile))
	}
	if req.Credentials != nil {
		credEnv, err := credentials.WriteProfileForGroup(filepath.Join(comm, commCredentials), filepath.Join(podCommDir, commCredentials), *req.Credentials, mountpointGID)
		if err != nil {
			return fmt.Errorf("write credentials for Mountpoint Pod %s: %w", mp, err)
		}
		env = append(env, credEnv...)
	}
	if err := m.ensureSource(ctx, req, pod, source, comm, env); err != nil {
		return err
	}
	switch state {
	case mounttable.Mounted:
		if !mounttable.IsMountS3(entry) {
			return fmt.Errorf("%w: %s holds a %s mount from %s", mounter.ErrTargetInUse, req.Target, entry.FsType, entry.Source)
		}
		binds, err := bindsOf(m.table, source, m.paths.pods())
		if err != nil {
			return err
		}
		for _, b := range binds {
			if b == req.Target {
				return nil // already published: credentials refreshed above
			}
		}
		return fmt.Errorf("%w: %s holds a mount-s3 mount that is not Mountpoint Pod %s's", mounter.ErrTargetInUse, req.Target, mp)
	case mounttable.Corrupted:
		if err := unmount(req.Target, 0); err != nil {
			return err
		}
	}
	created := false
	if err := os.Mkdir(req.Target, 0o755); err == nil {
		created = true
	} else if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create target directory: %w", err)
	}
	if err := bindMount(source, req.Target, req.ReadOnly); err != nil {
		if created {
			os.Remove(req.Target)
		}
		return err
	}
	klog.V(2).InfoS("Published through Mountpoint Pod", "target", req.Target, "mountpointPod", mp, "volumeID", req.VolumeID)
	return nil
}

// ensureSource makes sure the Mountpoint Pod serves the bucket at source: nothing to do when it
// already does; otherwise mount FUSE, send the options and the fd, and wait until mount-s3
// answers (or reports an error in mount.err).
func (m *Mounter) ensureSource(ctx context.Context, req mounter.Request, pod *corev1.Pod, source, comm string, env []string) error {
	state, _, err := m.table.Inspect(source)
	if err != nil {
		return err
	}
	switch state {
	case mounttable.Mounted:
		return nil
	case mounttable.Corrupted:
		klog.InfoS("Shared mount is corrupted, mounting it again", "source", source, "mountpointPod", pod.Name)
		if err := m.unmountSource(source); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(source, 0o755); err != nil {
		return fmt.Errorf("create source directory: %w", err)
	}
	args := req.Args.Clone()
	if !req.VolumeReadOnly {
		args.Remove("read-only") // a shared mount is read-only only when the volume is; workloads get read-only binds
	}
	_ = os.Remove(filepath.Join(comm, commError))
	errWatch, err := watchFile(comm, commError)
	if err != nil {
		return err
	}
	defer errWatch.Close()
	fuse, err := mountFUSE(source, args, req.VolumeReadOnly)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			if err := m.unmountSource(source); err != nil {
				klog.ErrorS(err, "Cleanup of a failed shared mount", "source", source)
			}
		}
	}()
	start := time.Now()
	sendErr := mountoptions.Send(ctx, filepath.Join(comm, commSocket), mountoptions.Options{BucketName: req.Bucket, Args: args.List(), Env: env}, int(fuse.Fd()))
	fuse.Close() // the pod holds its own copy now (or never will)
	if sendErr != nil {
		return fmt.Errorf("hand the mount over to Mountpoint Pod %s: %w", pod.Name, sendErr)
	}
	if err := waitServed(ctx, source, errWatch); err != nil {
		return fmt.Errorf("%w: Mountpoint Pod %s: %s", mounter.ErrMountFailed, pod.Name, err)
	}
	ok = true
	klog.V(2).InfoS("Mountpoint Pod serves the bucket", "mountpointPod", pod.Name, "bucket", req.Bucket, "source", source, "duration", time.Since(start))
	return nil
}

// waitServed waits until the FUSE mount at source answers (mount-s3 took it over) or the pod
// writes mount.err.
func waitServed(ctx context.Context, source string, errWatch *fileWatch) error {
	served := make(chan error, 1)
	go func() { _, err := os.Stat(source); served <- err }()
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

// unmountSource removes a shared FUSE mount, also when no daemon serves it anymore.
func (m *Mounter) unmountSource(source string) error {
	state, entry, err := m.table.Inspect(source)
	if err != nil {
		return err
	}
	if state == mounttable.Mounted || state == mounttable.Corrupted {
		if entry != nil {
			abortConnection(entry.Minor)
			m.unmountOwnCopies(source, entry)
		}
		if err := unmount(source, 0); err != nil {
			if err := unmount(source, 2 /* MNT_DETACH */); err != nil {
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
	entries, err := m.table.List()
	if err != nil {
		return
	}
	pods := m.paths.pods() + "/"
	for _, e := range entries {
		if e.Major == entry.Major && e.Minor == entry.Minor && e.MountPoint != source && !strings.HasPrefix(e.MountPoint, pods) {
			if err := unmount(e.MountPoint, 2 /* MNT_DETACH */); err != nil {
				klog.ErrorS(err, "Detaching a copy of a shared mount", "source", source, "copy", e.MountPoint)
			} else {
				klog.V(2).InfoS("Detached a copy of a shared mount", "source", source, "copy", e.MountPoint)
			}
		}
	}
}

// Unmount implements mounter.Mounter: it removes only the workload's bind mount (and the empty
// target directory); the shared mount stays for the other workloads until the controller
// retires the Mountpoint Pod.
func (m *Mounter) Unmount(ctx context.Context, target string) error {
	state, entry, err := m.table.Inspect(target)
	if err != nil {
		return err
	}
	if state == mounttable.Mounted && !mounttable.IsMountS3(entry) {
		return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount; not unmounting it", mounter.ErrTargetInUse, target, entry.FsType, entry.Source)
	}
	mp := m.sourceOf(entry)
	if state == mounttable.Mounted || state == mounttable.Corrupted {
		if err := unmount(target, 0); err != nil {
			return err
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.InfoS("Target directory not removed", "target", target, "err", err)
	}
	if mp != "" && m.unbound != nil {
		m.unbound(mp)
	}
	return nil
}

// sourceOf returns the Mountpoint Pod whose shared mount entry is a bind of ("" if none).
func (m *Mounter) sourceOf(entry *mounttable.Entry) string {
	if entry == nil {
		return ""
	}
	entries, err := m.table.List()
	if err != nil {
		return ""
	}
	root := m.paths.sourceRoot() + "/"
	for _, e := range entries {
		if e.Major == entry.Major && e.Minor == entry.Minor && strings.HasPrefix(e.MountPoint, root) {
			return strings.TrimPrefix(e.MountPoint, root)
		}
	}
	return ""
}

// withMargin returns ctx shortened by margin when it has a deadline, so a wait that times out
// still leaves time to report why.
func withMargin(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*margin {
		return context.WithDeadline(ctx, dl.Add(-margin))
	}
	return context.WithCancel(ctx)
}

// keyedMutex is a mutex per key, created on demand and dropped when unused.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*refMutex{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &refMutex{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
