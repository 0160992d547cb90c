package pod

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOOMKilled(t *testing.T) {
	now := time.Now()
	limited := corev1.Container{Name: "mountpoint", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}
	term := func(reason string, at time.Time) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{Reason: reason, ExitCode: 137, FinishedAt: metav1.NewTime(at)}
	}
	cases := []struct {
		name       string
		container  corev1.Container
		state      corev1.ContainerStatus
		want       bool
		wantDetail string
	}{
		{"restarted after an OOM kill", limited, corev1.ContainerStatus{Name: "mountpoint", LastTerminationState: corev1.ContainerState{Terminated: term("OOMKilled", now)}}, true, "OOM-killed at its memory limit 256Mi"},
		{"not restarted yet", limited, corev1.ContainerStatus{Name: "mountpoint", State: corev1.ContainerState{Terminated: term("OOMKilled", now)}}, true, "OOM-killed at its memory limit 256Mi"},
		{"no limit: the node's memory", corev1.Container{Name: "mountpoint"}, corev1.ContainerStatus{Name: "mountpoint", LastTerminationState: corev1.ContainerState{Terminated: term("OOMKilled", now)}}, true, "no memory limit (the node ran out of memory)"},
		{"an OOM kill long before this death", limited, corev1.ContainerStatus{Name: "mountpoint", LastTerminationState: corev1.ContainerState{Terminated: term("OOMKilled", now.Add(-time.Hour))}}, false, ""},
		{"killed otherwise", limited, corev1.ContainerStatus{Name: "mountpoint", LastTerminationState: corev1.ContainerState{Terminated: term("Error", now)}}, false, ""},
		{"never ended", limited, corev1.ContainerStatus{Name: "mountpoint"}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mount-s3", Name: "mp-1"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{tc.container}}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{tc.state}}}
			got := oomKilled(pod, now.Add(-time.Minute))
			if got.OOMKilled != tc.want || !strings.Contains(got.Detail, tc.wantDetail) {
				t.Errorf("oomKilled = %+v, want %v with %q", got, tc.want, tc.wantDetail)
			}
			if tc.want && !strings.Contains(got.Detail, "mount-s3/mp-1") {
				t.Errorf("detail %q does not name the Mountpoint Pod", got.Detail)
			}
		})
	}
}
