package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testUnplaceable: a volume whose Mountpoint Pods ask for more memory than the node has
// (mountpointMemoryRequest). The real scheduler cannot place the Mountpoint Pod; the workload
// gets the controller's Warning Event naming the scheduler's reason (its owner may not read
// the mount-s3 namespace), does not run, and when it is deleted the Mountpoint Pod, which never
// ran, goes too: nothing is left Pending.
func testUnplaceable(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "unplaceable")
	bucket := "unplaceable-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "big", bucket, volumeOpts{attributes: map[string]string{"mountpointMemoryRequest": "1000Gi"}})
	w := workload(t, ns, "w", claim, podOpts{})
	var msg string
	harness.Eventually(t, time.Minute, func() string {
		for _, e := range eventsOn(t, ns, w.Name) {
			if e.Reason == "MountpointPodUnschedulable" {
				msg = e.Message
				return ""
			}
		}
		return "no MountpointPodUnschedulable event on " + w.Name + " yet: " + podEvents(w)
	})
	for _, want := range []string{"for PersistentVolume", "cannot be scheduled: Unschedulable:", "Insufficient memory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q lacks %q", msg, want)
		}
	}
	var cur corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(w), &cur))
	if cur.Status.Phase == corev1.PodRunning {
		t.Errorf("workload runs without its volume")
	}
	deletePods(t, w)
	expectClean(t)
}

// testFallback: the node filled to capacity (a pod requesting all the memory the node has
// left but less than a Mountpoint Pod's request) and the chart's mounter.systemdFallbackAfter
// set. The real scheduler cannot place the workload's Mountpoint Pod; after the bound the node
// plugin mounts the volume through systemd mode: the workload starts, reads and writes the
// bucket, and gets the Warning Event MountedThroughSystemd naming the scheduler's reason; the
// Mountpoint Pod that never ran goes. Once the node has room, a new workload on the same
// volume gets a Mountpoint Pod while the first keeps its unit; deleting both leaves nothing.
func testFallback(t *testing.T) {
	installChart(t, "--set", "mounter.systemdFallbackAfter=15s")
	defer installChart(t) // the suite's values again (no fallback)
	setMode(t, "pod")
	ns := newNamespace(t, "fallback")
	bucket := "fallback-" + suffix()
	env.s3.CreateBucket(t, bucket)
	env.s3.PutObject(t, bucket, "from-s3.txt", []byte("put through S3\n"))
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	filler := fillNode(t, ns, resource.MustParse("100Mi")) // a Mountpoint Pod asks for 128Mi

	w := workload(t, ns, "w", claim, podOpts{})
	waitRunning(t, 2*time.Minute, w)
	var msg string
	for _, e := range eventsOn(t, ns, w.Name) {
		if e.Reason == "MountedThroughSystemd" {
			msg = e.Message
		}
	}
	for _, want := range []string{"is mounted through systemd mode", "has not been scheduled for 15s", "Insufficient memory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Event MountedThroughSystemd %q lacks %q: %s", msg, want, podEvents(w))
		}
	}
	if out := mustRun(t)(execIn(t, w, "cat /data/from-s3.txt && printf 'fell back\\n' > /data/w.txt")); out != "put through S3\n" {
		t.Errorf("object read through the fallback mount = %q", out)
	}
	if got := string(env.s3.GetObject(t, bucket, "w.txt")); got != "fell back\n" {
		t.Errorf("object written through the fallback mount = %q", got)
	}
	harness.Eventually(t, time.Minute, func() string {
		if s := currentState(t); len(s.units) != 1 || len(s.mpPods) != 0 || len(s.attachments) != 0 {
			return "want one unit, the unscheduled Mountpoint Pod and its attachment gone: " + s.String()
		}
		return ""
	})

	// Room again: a new workload gets a Mountpoint Pod; the first keeps systemd mode.
	deletePods(t, filler)
	w2 := workload(t, ns, "w2", claim, podOpts{})
	waitRunning(t, 2*time.Minute, w2)
	if out := mustRun(t)(execIn(t, w2, "cat /data/w.txt")); out != "fell back\n" {
		t.Errorf("the pod-mode workload reads %q", out)
	}
	if s := currentState(t); len(s.units) != 1 || len(s.mpPods) != 1 {
		t.Errorf("want the first workload's unit and the second's Mountpoint Pod: %s", s)
	}
	deletePods(t, w, w2)
	expectClean(t)
}

// fillNode starts a pod requesting the memory the node has left less margin, so that nothing
// asking for more than margin fits, and waits until it runs.
func fillNode(t *testing.T, ns string, margin resource.Quantity) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	free := nodeObj(t).Status.Allocatable.Memory().DeepCopy()
	var pods corev1.PodList
	harness.Must(t, env.c.List(ctx, &pods))
	for _, p := range pods.Items {
		if p.Spec.NodeName != rig.NodeName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// What the scheduler counts: the containers' sum, or the largest init container.
		var sum resource.Quantity
		for _, c := range p.Spec.Containers {
			sum.Add(*c.Resources.Requests.Memory())
		}
		for _, c := range p.Spec.InitContainers {
			if c.Resources.Requests.Memory().Cmp(sum) > 0 {
				sum = c.Resources.Requests.Memory().DeepCopy()
			}
		}
		free.Sub(sum)
	}
	free.Sub(margin)
	if free.Sign() <= 0 {
		t.Fatalf("the node has less than %s of memory left to fill", margin.String())
	}
	filler := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "filler", Image: rig.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:   []string{"sh", "-c", idle},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: free}},
			}},
		},
	}
	harness.Must(t, env.c.Create(ctx, filler))
	waitRunning(t, time.Minute, filler)
	t.Logf("the node is full: filler requests %s of memory", free.String())
	return filler
}

// testMountpointOOM: a volume whose Mountpoint Pod has a memory limit (mountpointMemoryLimit
// 256Mi), and a read that makes the stand-in grow past it (its test hook: the object
// .s3csi-standin-grow-1024). The kernel's OOM killer ends mount-s3 in the real container
// cgroup, kubelet restarts the container and reports OOMKilled, the node plugin mounts the
// volume again, and the workload gets MountRepaired then the Warning Event MountOOMKilled
// naming the limit; a workload with HostToContainer propagation reads through the repaired
// mount without a restart.
func testMountpointOOM(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "oom")
	ctx := context.Background()
	bucket := "oom-" + suffix()
	env.s3.CreateBucket(t, bucket)
	env.s3.PutObject(t, bucket, "data.txt", []byte("still here\n"))
	env.s3.PutObject(t, bucket, ".s3csi-standin-grow-1024", []byte("grow\n"))
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{attributes: map[string]string{"mountpointMemoryLimit": "256Mi"}})
	h2c := corev1.MountPropagationHostToContainer
	w := workload(t, ns, "w", claim, podOpts{propagation: &h2c})
	waitRunning(t, 2*time.Minute, w)
	grown := time.Now()
	out, err := execIn(t, w, "cat /data/.s3csi-standin-grow-1024")
	t.Logf("the read that grows mount-s3 past its limit: %q %v", out, err)

	harness.Eventually(t, 2*time.Minute, func() string {
		var msg string
		for _, e := range eventsOn(t, ns, w.Name) {
			if e.Reason == "MountOOMKilled" {
				msg = e.Message
			}
		}
		if !strings.Contains(msg, "OOM-killed at its memory limit 256Mi") {
			return fmt.Sprintf("no MountOOMKilled event naming the 256Mi limit yet (%q): %s", msg, podEvents(w))
		}
		return ""
	})
	t.Logf("MountOOMKilled on the workload %v after the read", time.Since(grown).Round(time.Millisecond))
	if got := eventReasons(t, ns, w.Name); !slices.Contains(got, "MountDead") || !slices.Contains(got, "MountRepaired") {
		t.Errorf("workload events %v, want MountDead and MountRepaired too", got)
	}
	// What kubelet itself reports of the Mountpoint Pod: a restart after an OOM kill (its
	// status may lag behind the restart the repair used).
	harness.Eventually(t, 30*time.Second, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(mpNamespace)))
		if len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
			return fmt.Sprintf("want one Mountpoint Pod with one container, got %d pods", len(pods.Items))
		}
		cs := pods.Items[0].Status.ContainerStatuses[0]
		if last := cs.LastTerminationState.Terminated; cs.RestartCount < 1 || last == nil || last.Reason != "OOMKilled" {
			return fmt.Sprintf("Mountpoint Pod container: %d restarts, last termination %+v; want a restart after OOMKilled", cs.RestartCount, last)
		}
		return ""
	})
	harness.Eventually(t, 30*time.Second, func() string {
		if out, err := execIn(t, w, "cat /data/data.txt"); err != nil || out != "still here\n" {
			return fmt.Sprintf("read through the repaired mount: %q %v", out, err)
		}
		return ""
	})
	deletePods(t, w)
	expectClean(t)
}
