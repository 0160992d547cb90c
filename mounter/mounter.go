// Package mounter defines the one interface the node server mounts volumes through, and the
// request it takes. Two implementations exist: mounter/systemd (mount-s3 as a transient
// systemd unit on the host) and mounter/pod (mount-s3 in a Mountpoint Pod); mounter/mountertest
// is an in-memory fake for unit tests of the node server.
package mounter

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
)

// Request describes one mount of a bucket at a workload's target path. Everything in it has
// been validated by the node server; credentials are the only sensitive field and format
// themselves redacted.
type Request struct {
	// VolumeID is the CSI volume id (the PV's volumeHandle).
	VolumeID string
	// PVName and WorkloadPodUID come from the target path (or kubelet's pod info); either may be
	// empty when the target does not follow kubelet's layout.
	PVName            string
	WorkloadPodUID    string
	WorkloadNamespace string
	// WorkloadPodName is the workload pod's name (kubelet's podInfoOnMount), for the Events the
	// node plugin reports on it; empty when kubelet did not send it.
	WorkloadPodName string
	// Bucket is the S3 bucket to mount.
	Bucket string
	// Target is the validated, absolute target path.
	Target string
	// Args are the policy-checked mount-s3 options (without bucket and mount point).
	Args mountargs.Args
	// Env is the non-secret environment mount-s3 runs with (endpoint, region, retry settings).
	// Implementations add the credential profile variables themselves and pass nothing else.
	Env []string
	// Credentials are nil for anonymous mounts (--no-sign-request).
	Credentials *credentials.Credentials
	// CABundle is a PEM bundle mount-s3 must trust for the endpoint (nil: the system's CAs).
	// Implementations write it next to the credentials and point AWS_CA_BUNDLE at it.
	CABundle []byte
	// ReadOnly is true for read-only publishes; Args then already contain --read-only.
	ReadOnly bool
	// VolumeReadOnly is true when the volume itself is read-only for every workload (access
	// mode ReadOnlyMany, or a read-only mount option), as opposed to one workload asking for a
	// read-only publish. A mount shared by several workloads is read-only only in this case.
	VolumeReadOnly bool
	// FSGroup is the workload's fsGroup ("" when none); Args already carry its effects.
	FSGroup string
	// Recovery is what the node plugin does after repairing a dead mount (volume attribute
	// mountRecovery): RecoveryRepair or RecoveryRestartPod.
	Recovery string
	// Resources are mount-s3's requests and limits (the node plugin's defaults with the
	// volume's overrides, checked): systemd mode applies them to the unit; in pod mode the
	// controller gave them to the Mountpoint Pod already.
	Resources corev1.ResourceRequirements
}

// Recovery policies (volume attribute mountRecovery).
const (
	// RecoveryRepair mounts a dead mount again on the host; containers whose volumeMount has
	// HostToContainer propagation see it, others after they restart.
	RecoveryRepair = "repair"
	// RecoveryRestartPod also deletes, after the repair, a workload pod that has an owner (its
	// controller recreates it) when one of its containers mounts the volume without
	// HostToContainer propagation, so no container is left on a dead mount.
	RecoveryRestartPod = "restart-pod"
)

// CABundleFile is the name implementations give the CA bundle file.
const CABundleFile = "ca-bundle.pem"

// Mounter mounts and unmounts S3 volumes at target paths.
type Mounter interface {
	// Mount makes req.Bucket available at req.Target. It is idempotent: when a healthy mount-s3
	// mount of the same volume is already at the target it only refreshes the credentials and
	// returns nil (this is how kubelet's periodic republish rotates credentials). A corrupted
	// mount at the target is unmounted and mounted again. On failure nothing is left behind
	// (no process, no unit, no credential file) and the target is as it was; the error carries
	// mount-s3's own output when mount-s3 ran. A target holding a different volume or a mount
	// that is not mount-s3's yields an error wrapping ErrTargetInUse.
	Mount(ctx context.Context, req Request) error
	// Unmount removes the mount at target together with everything Mount created for it
	// (process, unit, credential files) and removes the target directory if it is empty.
	// Unmounting a target that is not mounted, or does not exist, succeeds; a corrupted mount is
	// unmounted, not reported as absent.
	Unmount(ctx context.Context, target string) error
}

// ErrTargetInUse is wrapped when the target holds something Mount must not replace.
var ErrTargetInUse = errors.New("target path is already in use")

// ErrUnavailable is wrapped when the mount backend (systemd, the Kubernetes API) cannot be
// reached; the operation may succeed when retried.
var ErrUnavailable = errors.New("mount backend unavailable")

// ErrUnplaceable is wrapped when pod mode gives up on a volume because its Mountpoint Pod
// could not be scheduled within the node plugin's fallback bound (--systemd-fallback-after):
// the Router then mounts the volume through systemd mode, when the node has it.
var ErrUnplaceable = errors.New("the Mountpoint Pod cannot be placed")

// ErrInvalidRequest is wrapped when a request lacks what the implementation needs (for example
// the workload pod UID in pod mode).
var ErrInvalidRequest = errors.New("invalid mount request")

// ErrMountFailed is wrapped when mount-s3 ran and failed; the error text carries its output.
var ErrMountFailed = errors.New("mount-s3 failed")

// Target is a published target as a mount mode records it, for the node plugin's own checks
// and repairs (outside kubelet's calls).
type Target struct {
	// Path is the target path.
	Path     string
	VolumeID string
	// The workload pod (for Events); any may be empty when kubelet did not send it.
	WorkloadPodUID, WorkloadPodName, WorkloadNamespace string
	// PVName is the PersistentVolume (from kubelet's target path layout; may be empty).
	PVName string
	// Recovery is the volume's recovery policy (Request.Recovery).
	Recovery string
}

// PublishedTarget is the Target r publishes.
func (r *Request) PublishedTarget() Target {
	return Target{Path: r.Target, VolumeID: r.VolumeID, WorkloadPodUID: r.WorkloadPodUID, WorkloadPodName: r.WorkloadPodName,
		WorkloadNamespace: r.WorkloadNamespace, PVName: r.PVName, Recovery: r.Recovery}
}

// Repairer is implemented by a mount mode that can list the targets it published and mount one
// of them again, from its own records, when its mount died or vanished.
type Repairer interface {
	// Targets lists the targets published and not unpublished yet.
	Targets() []Target
	// Recorded reports whether target is still published (Targets may be stale by the time a
	// caller looks at one).
	Recorded(target string) bool
	// Repair mounts target again if its mount is dead or gone, and reports whether it did; a
	// live mount, or a target it has no record of, is left alone. Mount's rules apply: on
	// success the new mount answers.
	Repair(ctx context.Context, target string) (bool, error)
}

// Ending is how a mount's mount-s3 ended, as far as its mode can tell (EndReporter).
type Ending struct {
	// OOMKilled is true when the kernel's OOM killer ended it (a memory limit, or the node's
	// memory).
	OOMKilled bool
	// Detail says which daemon and at what limit, for people (an Event).
	Detail string
}

// EndReporter is implemented by a mount mode that can tell how the mount-s3 of a target it
// records ended (the zero Ending when it cannot), for a death noticed at since.
type EndReporter interface {
	HowItEnded(ctx context.Context, target string, since time.Time) Ending
}
