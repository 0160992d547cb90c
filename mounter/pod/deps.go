package pod

import (
	"context"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// What the pod-mode Mounter needs from the outside, each as small as its use. Cluster, the
// node's kernel and mountoptions.Send are the real ones; the unit tests use fakes.

// mountpointPods is the Mounter's view of the API: this node's Mountpoint Pods and attachments
// (Cluster).
type mountpointPods interface {
	// WaitForMountpointPod waits until the workload's volume is attached to a Running
	// Mountpoint Pod of this node and returns the pod.
	WaitForMountpointPod(ctx context.Context, workloadUID, pvName, volumeID string) (*corev1.Pod, error)
	// MountpointPod returns one of this node's Mountpoint Pods (nil when absent).
	MountpointPod(ctx context.Context, name string) (*corev1.Pod, error)
	// ReadMountpointPod reads a Mountpoint Pod whole from the API server (the cache keeps
	// neither containers nor their statuses); nil when absent.
	ReadMountpointPod(ctx context.Context, name string) (*corev1.Pod, error)
	// MountpointPods lists this node's Mountpoint Pods.
	MountpointPods(ctx context.Context) ([]corev1.Pod, error)
	// OnMountpointPod registers f for every change of one of them (pod nil: deleted).
	OnMountpointPod(f func(name string, pod *corev1.Pod))
}

var _ mountpointPods = (*Cluster)(nil)

// unmountHow is how a mount is removed.
type unmountHow int

const (
	// plain fails when the mount is busy.
	plain unmountHow = iota
	// detach removes the mount from the tree at once (MNT_DETACH).
	detach
	// abort also aborts a FUSE connection first, so nothing waits on a dead daemon
	// (MNT_FORCE|MNT_DETACH).
	abort
)

// kernel makes and removes pod mode's mounts (hostKernel).
type kernel interface {
	// MountFUSE mounts a new FUSE connection at source and returns its /dev/fuse fd.
	MountFUSE(source string, allowOther, readOnly bool) (*os.File, error)
	// Bind makes target show source (read-only when asked), on the directory target names
	// without following a link.
	Bind(source, target string, readOnly bool) error
	// Unmount removes the top mount at path; nothing mounted is not an error.
	Unmount(path string, how unmountHow) error
	// Answer returns once the filesystem at path answers (blocks while it does not).
	Answer(path string) error
}

// sendFunc hands mount options and a FUSE fd to the Mountpoint Pod listening on socket
// (mountoptions.Send).
type sendFunc func(ctx context.Context, socket string, o mountoptions.Options, fd int) error

// bindsOf lists the targets bound to source: the mount points below podsDir (kubelet's
// pods directory) that show the same filesystem, from the mount table. Other copies of the
// mount do not count as users: after a node plugin restart its container sees the shared mount
// again under /csi (the plugin directory's mount, a recursive bind of the host's), and the
// kubelet directory may itself be bound elsewhere on the host.
func bindsOf(table mounttable.Table, source, podsDir string) ([]string, error) {
	entries, err := table.List()
	if err != nil {
		return nil, err
	}
	var src *mounttable.Entry
	for i := range entries {
		if entries[i].MountPoint == source {
			src = &entries[i]
		}
	}
	if src == nil {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{} // once per target, which holds two binds
	for _, e := range entries {
		if e.SameFileSystem(src) && strings.HasPrefix(e.MountPoint, podsDir+"/") && !seen[e.MountPoint] {
			seen[e.MountPoint] = true
			out = append(out, e.MountPoint)
		}
	}
	return out, nil
}
