package podrestart

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/s3csi/s3-csi-driver/mounter"
)

func TestRestartIfBlind(t *testing.T) {
	h2c := corev1.MountPropagationHostToContainer
	pod := func(name, node string, owned bool, propagation *corev1.MountPropagationMode) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + "x"},
			Spec: corev1.PodSpec{NodeName: node,
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}},
					{Name: "other", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{
					{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/d", MountPropagation: propagation}}},
					{Name: "sidecar", VolumeMounts: []corev1.VolumeMount{{Name: "other", MountPath: "/o"}}},
				}},
		}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", APIVersion: "apps/v1", UID: "rs"}}
		}
		return p
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}}
	target := mounter.Target{VolumeID: "v", PVName: "pv-1", WorkloadPodName: "w", WorkloadNamespace: "ns", WorkloadPodUID: "uid-x", Recovery: mounter.RecoveryRestartPod}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		deleted bool
		errLike string
	}{
		{"owned pod with a blind container is deleted", pod("w", "node-1", true, nil), true, ""},
		{"every container sees the repair", pod("w", "node-1", true, &h2c), false, ""},
		{"a pod without an owner is never deleted", pod("w", "node-1", false, nil), false, "no owner"},
		{"a pod on another node is not touched", pod("w", "node-2", true, nil), false, "not on this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.pod, claim)
			r := &Restarter{cs: cs.CoreV1(), node: "node-1"}
			what, err := r.RestartIfBlind(context.Background(), target)
			if tc.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLike) {
					t.Fatalf("err = %v, want %q", err, tc.errLike)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			_, getErr := cs.CoreV1().Pods("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(getErr); deleted != tc.deleted {
				t.Fatalf("deleted = %v, want %v", deleted, tc.deleted)
			}
			if tc.deleted && (!strings.Contains(what, "app") || strings.Contains(what, "sidecar") || !strings.Contains(what, "ReplicaSet web-1")) {
				t.Errorf("event text %q", what)
			}
		})
	}
	// A pod replaced since the publish (another UID) is left alone.
	replaced := pod("w", "node-1", true, nil)
	replaced.UID = "uid-new"
	cs := fake.NewClientset(replaced, claim)
	if what, err := (&Restarter{cs: cs.CoreV1(), node: "node-1"}).RestartIfBlind(context.Background(), target); err != nil || what != "" {
		t.Errorf("replaced pod: %q, %v", what, err)
	}
}
