package pod

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// ExitWatch tells at once when a Mountpoint Pod of this node reports that its mount-s3 exited:
// the mounter in the pod writes mount.err in its comm directory before it exits (non-zero exit:
// a crash, a kill, an OOM kill of mount-s3 alone). The mount monitor then checks the node's
// mounts without waiting for its next sweep, as systemd mode does with unit signals. A
// container that dies whole writes nothing; the pod's status change (OnMountpointPod) covers
// it, later. One inotify instance watches every comm directory; nothing in them is read here
// (they are the pods' to write: the monitor's check decides what is dead).
type ExitWatch struct {
	kubelet string
	changed func()
	w       *fsnotify.Watcher

	mu      sync.Mutex
	watched map[string]string // Mountpoint Pod name → its comm directory
}

// NewExitWatch returns an ExitWatch calling changed for the comm directories below kubeletDir.
// Feed it Mountpoint Pod events (Observe, as a Cluster.OnMountpointPod handler) and Run it.
func NewExitWatch(kubeletDir string, changed func()) (*ExitWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &ExitWatch{kubelet: kubeletDir, changed: changed, w: w, watched: map[string]string{}}, nil
}

// Observe starts watching the comm directory of a Running Mountpoint Pod and stops when the pod
// is gone (pod nil) or has ended. A directory that cannot be watched yet (kubelet has not made
// it) is tried again at the pod's next event.
func (e *ExitWatch) Observe(name string, pod *corev1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	dir, ok := e.watched[name]
	switch {
	case pod == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		if ok {
			_ = e.w.Remove(dir)
			delete(e.watched, name)
		}
	case !ok && pod.Status.Phase == corev1.PodRunning:
		dir = podcontract.CommHostPath(e.kubelet, pod.UID)
		if err := e.w.Add(dir); err != nil {
			klog.V(4).InfoS("Not watching a Mountpoint Pod's comm directory yet", "mountpointPod", name, "err", err)
			return
		}
		e.watched[name] = dir
	}
}

// Run calls changed for every mount.err created, renamed in or written, until ctx ends.
func (e *ExitWatch) Run(ctx context.Context) {
	defer e.w.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-e.w.Events:
			if !ok {
				return
			}
			if filepath.Base(ev.Name) == commError && ev.Op&(fsnotify.Create|fsnotify.Write) != 0 {
				e.changed()
			}
		case err, ok := <-e.w.Errors:
			if !ok {
				return
			}
			klog.V(4).InfoS("Watching Mountpoint Pods' comm directories", "err", err)
		}
	}
}
