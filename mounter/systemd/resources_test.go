package systemd

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestResourcesOf(t *testing.T) {
	q := resource.MustParse
	cases := []struct {
		name string
		in   corev1.ResourceRequirements
		want unitResources
	}{
		{"none", corev1.ResourceRequirements{}, unitResources{}},
		{"the chart's default requests", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}},
			unitResources{MemoryLow: 128 << 20, CPUWeight: 2}},
		{"one CPU: kubelet's 1024 shares", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1")}}, unitResources{CPUWeight: 39}},
		{"a millicore: the least shares", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1m")}}, unitResources{CPUWeight: 1}},
		{"limits", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("1Gi")}},
			unitResources{MemoryMax: 1 << 30, CPUQuotaUS: 500000}},
		{"a huge request stays within the weight range", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1000")}}, unitResources{CPUWeight: 10000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := resourcesOf(tc.in)
			if got != tc.want {
				t.Errorf("resourcesOf = %+v, want %+v", got, tc.want)
			}
			if n := len(got.properties()); (n == 0) != (tc.want == unitResources{}) {
				t.Errorf("%d properties for %+v", n, got)
			}
		})
	}
}
