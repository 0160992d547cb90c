package reconciler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// TestPlacementAdoptsAnUnrecordedMountpointPod: an earlier attempt created the Mountpoint Pod
// of the second waiting workload and died before recording it. Whatever the order of the
// waiting workloads now, placement adopts that pod instead of creating a second one (which
// would leave the first serving as an orphan until the orphan grace retires it).
func TestPlacementAdoptsAnUnrecordedMountpointPod(t *testing.T) {
	key := podcontract.Key{NodeName: "node-1", PVName: "pv-1", VolumeID: "bucket"}
	cfg := Config{MountpointPod: MountpointPodConfig{Namespace: "mount-s3", DriverVersion: "v1"}}
	w1 := &workload{Name: "w1", Namespace: "ns", UID: "uid-1"}
	w2 := &workload{Name: "w2", Namespace: "ns", UID: "uid-2"}
	for _, tc := range []struct {
		name     string
		existing *corev1.Pod // left by the earlier attempt
		want     string
		created  bool // a new Mountpoint Pod is expected
	}{
		{name: "nothing left: the first waiting workload names a new pod",
			want: podcontract.MountpointPodName("uid-1", "pv-1"), created: true},
		{name: "the second workload's pod is adopted",
			existing: buildMountpointPod(cfg.MountpointPod, key, podcontract.MountpointPodName("uid-2", "pv-1"), "uid-2", corev1.ResourceRequirements{}),
			want:     podcontract.MountpointPodName("uid-2", "pv-1")},
		{name: "a pod being retired is not adopted",
			existing: retired(buildMountpointPod(cfg.MountpointPod, key, podcontract.MountpointPodName("uid-2", "pv-1"), "uid-2", corev1.ResourceRequirements{})),
			want:     podcontract.MountpointPodName("uid-1", "pv-1"), created: true},
		{name: "a finished pod is not adopted",
			existing: finished(buildMountpointPod(cfg.MountpointPod, key, podcontract.MountpointPodName("uid-2", "pv-1"), "uid-2", corev1.ResourceRequirements{})),
			want:     podcontract.MountpointPodName("uid-1", "pv-1"), created: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithObjects(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}})
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			c := b.Build()
			r := &Reconciler{client: c, apiReader: c, cfg: cfg, metrics: newMetrics(c, "mount-s3")}
			got, err := r.placement(context.Background(), key, plan{}, map[string]*corev1.Pod{}, []*workload{w1, w2})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("placement = %s, want %s", got, tc.want)
			}
			var pods corev1.PodList
			if err := c.List(context.Background(), &pods, client.InNamespace("mount-s3")); err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.existing != nil {
				want++
			}
			if tc.created {
				want++
			}
			if len(pods.Items) != want {
				t.Errorf("%d Mountpoint Pods exist, want %d", len(pods.Items), want)
			}
			var p corev1.Pod
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "mount-s3", Name: got}, &p); err != nil {
				t.Errorf("the chosen Mountpoint Pod does not exist: %v", err)
			}
		})
	}
}

func retired(p *corev1.Pod) *corev1.Pod {
	p.Annotations[podcontract.AnnotationNeedsUnmount] = "true"
	return p
}

func finished(p *corev1.Pod) *corev1.Pod {
	p.Status.Phase = corev1.PodSucceeded
	return p
}
