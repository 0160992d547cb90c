// Package podcontract is what the controller (pkg/reconciler) and the node plugin (mounter/pod)
// agree on in pod mode, and nothing else: the names, labels and annotations of Mountpoint Pods
// and MountpointS3PodAttachments, the sharing key, the attachment field indexes, how a node finds
// the Mountpoint Pod of a workload's volume, and the comm volume through which the node hands a
// mount over. Both sides import it; neither imports the other. Changing a value here changes an
// interface with running pods, operators (docs/crd.md) and older releases.
package podcontract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Labels and annotations on Mountpoint Pods. needs-unmount is set by the controller when the
// last workload left (the node then retires the pod); no-new-workload is set by operators (or
// the controller) to keep new workloads off a pod.
const (
	LabelDriverVersion      = version.DriverName + "/mounted-by-csi-driver-version"
	LabelVolumeName         = version.DriverName + "/volume-name"
	LabelWorkloadUID        = version.DriverName + "/pod-uid"
	LabelComponent          = "app.kubernetes.io/component"
	ComponentMountpoint     = "mountpoint"
	AnnotationVolumeName    = version.DriverName + "/volume-name"
	AnnotationVolumeID      = version.DriverName + "/volume-id"
	AnnotationNeedsUnmount  = version.DriverName + "/needs-unmount"
	AnnotationNoNewWorkload = version.DriverName + "/no-new-workload"
)

// The comm volume: a memory-backed emptyDir the Mountpoint Pod sees at CommMountPath and the
// node plugin at CommHostPath. The pod runs as MountpointUID:MountpointUID with that fsGroup, so
// files the node writes there for it (credentials) are group-readable by MountpointUID.
const (
	CommVolume    = "comm"
	CommMountPath = "/comm"
	MountpointUID = 1000
)

// CommHostPath is where the node sees the comm volume of the Mountpoint Pod with UID podUID,
// below kubelet's root directory.
func CommHostPath(kubeletDir string, podUID types.UID) string {
	return filepath.Join(kubeletDir, "pods", string(podUID), "volumes", "kubernetes.io~empty-dir", CommVolume)
}

// MountpointPodName is the deterministic name of the Mountpoint Pod created for a workload pod
// and a PV: "mp-" + hex(SHA-224(workloadPodUID + pvName)).
func MountpointPodName(workloadPodUID, pvName string) string {
	sum := sha256.Sum224([]byte(workloadPodUID + pvName))
	return "mp-" + hex.EncodeToString(sum[:])
}

var labelValueRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// LabelValue returns v when it is a valid label value, "" otherwise.
func LabelValue(v string) string {
	if len(v) <= validation.LabelValueMaxLength && labelValueRE.MatchString(v) {
		return v
	}
	return ""
}

// VersionLabel is the value of LabelDriverVersion for a driver version (sanitised to a valid
// label value). Mountpoint Pods of another version are never shared with new workloads.
func VersionLabel(v string) string {
	if lv := LabelValue(v); lv != "" {
		return lv
	}
	return "invalid-version"
}

// MountpointPodOf returns the Mountpoint Pod that one of attachments assigns to the workload pod
// with UID workloadUID for volume volumeID of PV pvName on node, or "" when none does. Only an
// attachment of that node, PV and volume counts: a UID recorded under another key is not this
// volume's.
func MountpointPodOf(attachments []crdv2.MountpointS3PodAttachment, node, workloadUID, pvName, volumeID string) string {
	for i := range attachments {
		a := &attachments[i]
		if a.Spec.NodeName != node || a.Spec.PersistentVolumeName != pvName || a.Spec.VolumeID != volumeID {
			continue
		}
		for mp, ws := range a.Spec.MountpointS3PodAttachments {
			for _, w := range ws {
				if w.WorkloadPodUID == workloadUID {
					return mp
				}
			}
		}
	}
	return ""
}

// IsMountpointPod reports whether pod, in the Mountpoint Pod namespace, is a Mountpoint Pod: one
// of this driver's (LabelComponent and LabelDriverVersion) or one Scality's driver 2.x left
// running at an upgrade, which carries LabelDriverVersion but not LabelComponent
// (../shared/reference/anchors.md §5.5). Both kinds are retired and deleted the same way.
func IsMountpointPod(pod *corev1.Pod) bool {
	_, versioned := pod.Labels[LabelDriverVersion]
	return versioned || pod.Labels[LabelComponent] == ComponentMountpoint
}

// MountpointPodLabel is the label every Mountpoint Pod of either kind carries: list them with
// client.HasLabels{MountpointPodLabel}.
const MountpointPodLabel = LabelDriverVersion

// StripMountpointPod is an informer transform keeping of a Mountpoint Pod what the controller
// and the node plugin read from their caches: its metadata (without managed fields), node,
// phase and PodScheduled condition (with its transition time: how long a pod has been
// unschedulable decides the node plugin's fallback to systemd mode). The containers, volumes, other conditions and container
// statuses go: they are most of a pod's weight, and whoever needs them (a diagnosis) reads the
// pod from the API server.
func StripMountpointPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: pod.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	out.ManagedFields = nil
	return out, nil
}

// Unschedulable returns the scheduler's reason and message when pod cannot be scheduled
// (condition PodScheduled False, reason Unschedulable), and false otherwise.
func Unschedulable(pod *corev1.Pod) (string, bool) {
	why, _, ok := UnschedulableSince(pod)
	return why, ok
}

// UnschedulableSince is Unschedulable with the time the scheduler first found pod unschedulable
// (the condition's transition time; the pod's creation when the condition has none).
func UnschedulableSince(pod *corev1.Pod) (string, time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			since := c.LastTransitionTime.Time
			if since.IsZero() {
				since = pod.CreationTimestamp.Time
			}
			return c.Reason + ": " + c.Message, since, true
		}
	}
	return "", time.Time{}, false
}

// ParseExtraMetadata parses the labels (labels true) or annotations an operator adds to every
// Mountpoint Pod, given as a JSON object of strings in flag. Keys must be valid Kubernetes
// keys, label values valid label values, annotations at most 256 KiB in all; the driver's own
// keys (this driver's domain, and LabelComponent for labels) are refused, since the node plugin
// and the controller read them. Errors name flag and the key.
func ParseExtraMetadata(flag, value string, labels bool) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object of strings, such as {\"team\":\"storage\"}: %v", flag, err)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: key %q: %s", flag, k, strings.Join(msgs, "; "))
		}
		if strings.HasPrefix(k, version.DriverName+"/") || (labels && k == LabelComponent) {
			return nil, fmt.Errorf("%s: key %q is the driver's own; use a key outside %s/", flag, k, version.DriverName)
		}
		if labels {
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				return nil, fmt.Errorf("%s: value of %q: %s", flag, k, strings.Join(msgs, "; "))
			}
		}
		size += len(k) + len(v)
	}
	if !labels && size > 256<<10 {
		return nil, fmt.Errorf("%s: %d bytes of annotations, at most 262144", flag, size)
	}
	return m, nil
}
