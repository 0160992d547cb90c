package nodeplugin

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// The node plugin reports what happens to a workload's mount on the workload pod.
// (The events create/patch permission comes from pkg/nodemode's RBAC marker.)

// ReasonSystemdFallback is the Warning Event on a workload whose volume was mounted through
// systemd mode because its Mountpoint Pod could not be placed (--systemd-fallback-after).
const ReasonSystemdFallback = "MountedThroughSystemd"

// podEvents records Events on workload pods (the mount monitor's Recorder).
type podEvents struct {
	recorder record.EventRecorder
}

// newEventRecorder returns a Recorder writing Events through core as the driver on node, and
// a function that stops it.
func newEventRecorder(core typedcorev1.CoreV1Interface, node string) (*podEvents, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.Events("")})
	r := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: version.DriverName, Host: node})
	return &podEvents{recorder: r}, b.Shutdown
}

// Event implements mountmonitor.Recorder.
func (e *podEvents) Event(t mounter.Target, warning bool, reason, message string) {
	kind := corev1.EventTypeNormal
	if warning {
		kind = corev1.EventTypeWarning
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: t.WorkloadNamespace, Name: t.WorkloadPodName, UID: types.UID(t.WorkloadPodUID)}
	e.recorder.Event(ref, kind, reason, message)
}
