package reconciler

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// fsGroupOf returns the pod's fsGroup as the attachment records it ("" when unset).
func fsGroupOf(pod *corev1.Pod) string {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		return strconv.FormatInt(*sc.FSGroup, 10)
	}
	return ""
}

// keyFor computes the key of a workload's volume backed by pv (already known to be this
// driver's). The caller has checked pv's claim.
func keyFor(w *workload, pv *corev1.PersistentVolume) podcontract.Key {
	auth := pv.Spec.CSI.VolumeAttributes["authenticationSource"]
	if auth == "" {
		auth = "driver"
	}
	return podcontract.Key{
		NodeName:     w.NodeName,
		PVName:       pv.Name,
		VolumeID:     pv.Spec.CSI.VolumeHandle,
		MountOptions: strings.Join(pv.Spec.MountOptions, ","),
		FSGroup:      w.FSGroup,
		AuthSource:   auth,
	}
}
