// Package podrestart applies the recovery policy restart-pod: after the node plugin repaired
// a dead mount on the host, it deletes a workload pod whose running containers cannot see the
// repair, so that the pod's controller recreates it. It is the only code of the node plugin
// that deletes pods; its RBAC (generated from the markers below into the chart's
// files/node-restart-rbac.yaml) is bound only when the chart enables it (node.restartPods).
package podrestart

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// The recovery policy restart-pod reads a workload pod and its claims, and deletes the pod.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// Restarter applies the recovery policy restart-pod (mountmonitor.Restarter): after a repair,
// it deletes the workload pod so that its controller recreates it, when and only when
//   - the pod still is the one that was published (same UID) and runs on this node,
//   - one of its containers mounts the repaired volume without HostToContainer (or
//     Bidirectional) propagation, so it cannot see the repair, and
//   - the pod has an owner (a pod without one would be gone for good: never deleted).
type Restarter struct {
	cs   typedcorev1.CoreV1Interface
	node string
}

// New returns a Restarter for the pods of node nodeName.
func New(cs typedcorev1.CoreV1Interface, nodeName string) *Restarter {
	return &Restarter{cs: cs, node: nodeName}
}

// RestartIfBlind implements mountmonitor.Restarter.
func (r *Restarter) RestartIfBlind(ctx context.Context, t mounter.Target) (string, error) {
	pod, err := r.cs.Pods(t.WorkloadNamespace).Get(ctx, t.WorkloadPodName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if (t.WorkloadPodUID != "" && string(pod.UID) != t.WorkloadPodUID) || pod.DeletionTimestamp != nil {
		return "", nil // replaced or going already
	}
	if pod.Spec.NodeName != r.node {
		return "", fmt.Errorf("pod %s/%s runs on %s, not on this node", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	volumes, err := r.volumesOf(ctx, pod, t.PVName)
	if err != nil {
		return "", err
	}
	blind := blindContainers(pod, volumes)
	if len(blind) == 0 {
		return "", nil // every container sees the repaired mount
	}
	if len(pod.OwnerReferences) == 0 {
		return "", fmt.Errorf("containers %s mount the volume without mountPropagation: HostToContainer, but pod %s/%s has no owner to recreate it, so it is not deleted", strings.Join(blind, ", "), pod.Namespace, pod.Name)
	}
	uid := pod.UID
	if err := r.cs.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	owner := pod.OwnerReferences[0]
	return fmt.Sprintf("Recovery policy restart-pod: deleted the pod for its %s %s to recreate it; its containers %s mount volume %s without mountPropagation: HostToContainer and could not see the repaired mount.",
		owner.Kind, owner.Name, strings.Join(blind, ", "), t.VolumeID), nil
}

// volumesOf returns the names of pod's volumes whose claim is bound to PV pvName.
func (r *Restarter) volumesOf(ctx context.Context, pod *corev1.Pod, pvName string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		claim := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name
		default:
			continue
		}
		pvc, err := r.cs.PersistentVolumeClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if pvName == "" || pvc.Spec.VolumeName == pvName {
			out[v.Name] = true
		}
	}
	return out, nil
}

// blindContainers lists the containers that mount one of volumes without a propagation that
// lets them see a new mount on the host.
func blindContainers(pod *corev1.Pod, volumes map[string]bool) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				continue
			}
			if p := m.MountPropagation; p == nil || (*p != corev1.MountPropagationHostToContainer && *p != corev1.MountPropagationBidirectional) {
				out = append(out, c.Name)
				break
			}
		}
	}
	return out
}
