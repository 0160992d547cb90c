package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// Key is the sharing key: workloads with equal keys share a Mountpoint Pod.
type Key struct {
	NodeName     string
	PVName       string
	VolumeID     string
	MountOptions string
	FSGroup      string
	AuthSource   string
}

// String renders the key unambiguously (fields are length-prefixed).
func (k Key) String() string {
	var b strings.Builder
	for _, f := range []string{k.NodeName, k.PVName, k.VolumeID, k.MountOptions, k.FSGroup, k.AuthSource} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
		b.WriteByte(';')
	}
	return b.String()
}

// keyOf returns the sharing key an attachment records.
func keyOf(a *crdv2.MountpointS3PodAttachment) Key {
	return Key{
		NodeName:     a.Spec.NodeName,
		PVName:       a.Spec.PersistentVolumeName,
		VolumeID:     a.Spec.VolumeID,
		MountOptions: a.Spec.MountOptions,
		FSGroup:      a.Spec.WorkloadFSGroup,
		AuthSource:   a.Spec.AuthenticationSource,
	}
}

// AttachmentName is the deterministic name of the attachment for a key. Two controllers that
// reconcile the same key concurrently race on this name, and the API server lets only one win.
func AttachmentName(k Key) string {
	sum := sha256.Sum224([]byte(k.String()))
	return "s3pa-" + hex.EncodeToString(sum[:])
}

// MountpointPodName is the deterministic name of the Mountpoint Pod created for a workload pod
// and a PV: "mp-" + hex(SHA-224(workloadPodUID + pvName)).
func MountpointPodName(workloadPodUID, pvName string) string {
	sum := sha256.Sum224([]byte(workloadPodUID + pvName))
	return "mp-" + hex.EncodeToString(sum[:])
}

// fsGroupOf returns the pod's fsGroup as the attachment records it ("" when unset).
func fsGroupOf(pod *corev1.Pod) string {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		return strconv.FormatInt(*sc.FSGroup, 10)
	}
	return ""
}

// keyFor computes the key of a workload pod's volume backed by pv (already known to be this
// driver's). The caller has checked pv's claim.
func keyFor(pod *corev1.Pod, pv *corev1.PersistentVolume) Key {
	auth := pv.Spec.CSI.VolumeAttributes["authenticationSource"]
	if auth == "" {
		auth = "driver"
	}
	return Key{
		NodeName:     pod.Spec.NodeName,
		PVName:       pv.Name,
		VolumeID:     pv.Spec.CSI.VolumeHandle,
		MountOptions: strings.Join(pv.Spec.MountOptions, ","),
		FSGroup:      fsGroupOf(pod),
		AuthSource:   auth,
	}
}
