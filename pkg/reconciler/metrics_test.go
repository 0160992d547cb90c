package reconciler

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// TestOldestPendingMountpointPod: the gauge is the age of the oldest Pending Mountpoint Pod
// (a pod without a phase yet counts as Pending), 0 when none is Pending; other pods of the
// namespace and Running ones do not count. Reconcile error series exist before any error.
func TestOldestPendingMountpointPod(t *testing.T) {
	// kind: "ours" (this driver's labels), "2x" (Scality 2.x's: the version label only), or
	// another pod of the namespace.
	mp := func(name string, phase corev1.PodPhase, age time.Duration, kind string) *corev1.Pod {
		labels := map[string]string{podcontract.LabelComponent: kind}
		switch kind {
		case "ours":
			labels = map[string]string{podcontract.LabelComponent: podcontract.ComponentMountpoint, podcontract.LabelDriverVersion: "v1"}
		case "2x":
			labels = map[string]string{podcontract.LabelDriverVersion: "2.2.0"}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "mount-s3", CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
			Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name     string
		pods     []*corev1.Pod
		min, max float64
	}{
		{"none", nil, 0, 0},
		{"running only", []*corev1.Pod{mp("a", corev1.PodRunning, time.Hour, "ours")}, 0, 0},
		{"oldest pending", []*corev1.Pod{
			mp("a", corev1.PodRunning, time.Hour, "ours"),
			mp("b", corev1.PodPending, 10*time.Minute, "ours"),
			mp("c", "", 20*time.Minute, "ours"),
			mp("d", corev1.PodPending, 2*time.Hour, "something-else"),
		}, 1200, 1260},
		{"a pending pod of 2.x counts", []*corev1.Pod{
			mp("b", corev1.PodPending, 10*time.Minute, "ours"),
			mp("e", corev1.PodPending, 30*time.Minute, "2x"),
			mp("d", corev1.PodPending, 2*time.Hour, "something-else"),
		}, 1800, 1860},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			for _, p := range tc.pods {
				b = b.WithObjects(p)
			}
			m := newMetrics(b.Build(), "mount-s3")
			reg := prometheus.NewRegistry()
			if err := m.register(reg); err != nil {
				t.Fatal(err)
			}
			got := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
				all := make(chan prometheus.Metric, 100)
				m.state.Collect(all)
				close(all)
				for metric := range all {
					if strings.Contains(metric.Desc().String(), "oldest_pending") {
						ch <- metric
					}
				}
			}))
			if got < tc.min || got > tc.max {
				t.Errorf("oldest pending = %v s, want %v..%v", got, tc.min, tc.max)
			}
			if n := testutil.CollectAndCount(m.reconcileErrors); n != 3 {
				t.Errorf("%d reconcile error series, want 3 (one per kind, at 0)", n)
			}
		})
	}
}
