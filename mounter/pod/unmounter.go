package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// Unmounter finishes Mountpoint Pods on this node: when the controller marks one needs-unmount
// (its last workload is gone) and no bind mount of its shared mount is left, it writes
// comm/mount.exit (the pod then exits Succeeded), unmounts the shared mount and removes it and
// the pod's credentials. It also removes shared mounts whose pod no longer exists. It reacts to
// Mountpoint Pod events and to workload unmounts, and sweeps periodically as a backstop.
type Unmounter struct {
	m     *Mounter
	sweep time.Duration
	work  chan string
}

// NewUnmounter wires an Unmounter to m and its cluster. Call before the cluster starts.
func NewUnmounter(m *Mounter, sweep time.Duration) *Unmounter {
	u := &Unmounter{m: m, sweep: sweep, work: make(chan string, 256)}
	m.cluster.OnMountpointPod(func(name string, _ *corev1.Pod) { u.enqueue(name) })
	m.unbound = u.enqueue
	return u
}

func (u *Unmounter) enqueue(mp string) {
	select {
	case u.work <- mp:
	default: // queue full: the sweep catches up
	}
}

// Run handles queued Mountpoint Pods and sweeps every interval until ctx ends.
func (u *Unmounter) Run(ctx context.Context) {
	t := time.NewTicker(u.sweep)
	defer t.Stop()
	u.Sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case mp := <-u.work:
			if err := u.handle(ctx, mp); err != nil {
				klog.ErrorS(err, "Retiring Mountpoint Pod", "mountpointPod", mp)
			}
		case <-t.C:
			u.Sweep(ctx)
		}
	}
}

// Sweep handles every shared mount directory and every needs-unmount Mountpoint Pod of the node.
func (u *Unmounter) Sweep(ctx context.Context) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(u.m.paths.sourceRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Sweep: read shared mount directory")
	}
	for _, e := range entries {
		seen[e.Name()] = true
		if err := u.handle(ctx, e.Name()); err != nil {
			klog.ErrorS(err, "Sweep", "mountpointPod", e.Name())
		}
	}
	pods, err := u.m.cluster.MountpointPods(ctx)
	if err != nil {
		klog.ErrorS(err, "Sweep: list Mountpoint Pods")
		return
	}
	for i := range pods {
		if !seen[pods[i].Name] && pods[i].Annotations[podcontract.AnnotationNeedsUnmount] != "" {
			if err := u.handle(ctx, pods[i].Name); err != nil {
				klog.ErrorS(err, "Sweep", "mountpointPod", pods[i].Name)
			}
		}
	}
}

// handle retires one Mountpoint Pod if it is gone or marked needs-unmount.
func (u *Unmounter) handle(ctx context.Context, mp string) error {
	unlock, err := u.m.locks.Lock(ctx, mp)
	if err != nil {
		return err
	}
	defer unlock()
	source := u.m.paths.source(mp)
	pod, err := u.m.cluster.MountpointPod(ctx, mp)
	if err != nil {
		return err
	}
	if pod == nil {
		_ = os.Remove(u.m.paths.sourceRecord(mp))
		if _, err := os.Stat(source); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		klog.InfoS("Removing the shared mount of a Mountpoint Pod that no longer exists", "mountpointPod", mp)
		return u.m.unmountSource(ctx, source)
	}
	if pod.Annotations[podcontract.AnnotationNeedsUnmount] == "" || pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	binds, err := bindsOf(u.m.health.Table, source, u.m.paths.pods())
	if err != nil {
		return err
	}
	if len(binds) > 0 {
		klog.V(4).InfoS("Mountpoint Pod marked needs-unmount but still in use", "mountpointPod", mp, "binds", len(binds))
		return nil
	}
	// The comm directory is the Mountpoint Pod's to write: only touched through a confined handle.
	comm, err := confined.Open(u.m.paths.comm(pod.UID))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("open the comm directory: %w", err)
	}
	if comm != nil {
		defer comm.Close()
		// mount.exit first: the pod must know the coming end of its mount is a request, not a crash.
		if err := comm.WriteFile(commExit, nil, 0o644, -1); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("write mount.exit: %w", err)
		}
	}
	if err := u.m.unmountSource(ctx, source); err != nil {
		return err
	}
	_ = os.Remove(u.m.paths.sourceRecord(mp))
	if comm != nil {
		if err := comm.RemoveAll(commCredentials); err != nil {
			return fmt.Errorf("remove credentials: %w", err)
		}
		_ = comm.Remove(mounter.CABundleFile)
	}
	klog.V(2).InfoS("Retired Mountpoint Pod", "mountpointPod", mp)
	return nil
}
