package mountresources

import (
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestResolve(t *testing.T) {
	defaults := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
	got, err := Resolve(defaults, map[string]string{AttrMemoryLimit: "1Gi", AttrCPURequest: "1", "bucketName": "b"})
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Requests[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("CPU request = %s, want the override 1", q.String())
	}
	if q := got.Requests[corev1.ResourceMemory]; q.String() != "128Mi" {
		t.Errorf("memory request = %s, want the default 128Mi", q.String())
	}
	if q := got.Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
		t.Errorf("memory limit = %s, want 1Gi", q.String())
	}
	if _, ok := got.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit appeared from nowhere")
	}
	if q := defaults.Requests[corev1.ResourceCPU]; q.String() != "50m" {
		t.Errorf("Resolve changed the defaults: %s", q.String())
	}
	if none, err := Resolve(corev1.ResourceRequirements{}, nil); err != nil || len(none.Requests)+len(none.Limits) != 0 {
		t.Errorf("no defaults and no overrides = %+v, %v; want nothing", none, err)
	}
}

func TestResolveRefuses(t *testing.T) {
	defaults := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}
	for _, tc := range []struct {
		attrs map[string]string
		want  []string
	}{
		{map[string]string{AttrMemoryLimit: "lots"}, []string{AttrMemoryLimit, "not a Kubernetes quantity", "512Mi"}},
		{map[string]string{AttrCPURequest: "0"}, []string{AttrCPURequest, "more than zero"}},
		{map[string]string{AttrCPULimit: "-1"}, []string{AttrCPULimit, "more than zero"}},
		{map[string]string{AttrMemoryLimit: "64Mi"}, []string{"memory request 128Mi is above its limit 64Mi"}},
		{map[string]string{AttrCPURequest: "2", AttrCPULimit: "1"}, []string{"cpu request 2 is above its limit 1"}},
	} {
		_, err := Resolve(defaults, tc.attrs)
		if err == nil {
			t.Errorf("%v accepted", tc.attrs)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not say %q", tc.attrs, err, w)
			}
		}
	}
}

func TestAttributes(t *testing.T) {
	if got := strings.Join(Attributes(), ","); got != "mountpointCPULimit,mountpointCPURequest,mountpointMemoryLimit,mountpointMemoryRequest" {
		t.Errorf("Attributes() = %s", got)
	}
	if !IsAttribute(AttrCPULimit) || IsAttribute("bucketName") {
		t.Error("IsAttribute is wrong")
	}
}

func TestCacheBudgetMiB(t *testing.T) {
	for limit, want := range map[string]uint64{"128Mi": 64, "1Gi": 922, "5Gi": 4608, "10G": 8583} {
		got, err := CacheBudgetMiB(resource.MustParse(limit))
		if err != nil || got != want {
			t.Errorf("CacheBudgetMiB(%s) = %d, %v; want %d", limit, got, err, want)
		}
	}
	if _, err := CacheBudgetMiB(resource.MustParse("100Mi")); err == nil || !strings.Contains(err.Error(), "use at least 128Mi") {
		t.Errorf("100Mi: %v", err)
	}
}

// TestMemoryTarget: the target under a limit is the limit less max(128 MiB, a quarter), at
// least 512 MiB; a limit below 640Mi is refused, naming the least.
func TestMemoryTarget(t *testing.T) {
	// 700Mi: a quarter (175) is above 128 MiB; 640Mi: 512 either way.
	for limit, want := range map[string]uint64{"640Mi": 512, "700Mi": 525, "768Mi": 576, "1Gi": 768, "4Gi": 3072} {
		if got := MemoryTargetMiB(resource.MustParse(limit)); got != want {
			t.Errorf("limit %s: target %d MiB, want %d", limit, got, want)
		}
	}
	err := Check(corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}})
	if err == nil || !strings.Contains(err.Error(), "the memory limit 512Mi is below the 640Mi mount-s3 needs") {
		t.Errorf("512Mi: %v", err)
	}
	if err := Check(corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: MinMemoryLimit}}); err != nil {
		t.Errorf("640Mi: %v", err)
	}
}

// TestCheckConcurrently: validations run in parallel (one per NodePublishVolume); a refusal's
// message must not write shared state (run with -race).
func TestCheckConcurrently(t *testing.T) {
	low := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Check(low); err == nil {
				t.Error("a 64Mi memory limit was accepted")
			}
		}()
	}
	wg.Wait()
}
