package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
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
// left but less than a Mountpoint Pod's request, at the Mountpoint Pods' own priority, so that
// they cannot preempt it) and the chart's mounter.systemdFallbackAfter
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
	// A Mountpoint Pod asks for 128Mi; the filler has its priority, so it cannot be preempted.
	filler := fillNode(t, ns, resource.MustParse("100Mi"), 1_000_000_000)

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
// asking for more than margin fits, and waits until it runs. It runs at priority (a class the
// test makes, never preempting: a miscount leaves it Pending rather than evicting anything),
// which decides who may preempt it.
func fillNode(t *testing.T, ns string, margin resource.Quantity, priority int32) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "s3e-filler-" + ns}, Value: priority,
		PreemptionPolicy: ptr.To(corev1.PreemptNever), Description: "the cluster suite's pod filling the node"}
	harness.Must(t, env.c.Create(ctx, class))
	t.Cleanup(func() { _ = env.c.Delete(context.Background(), class) })
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
			PriorityClassName:             class.Name,
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
// 640Mi, the least accepted), and a read that makes the stand-in grow past it (its test hook: the object
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
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{attributes: map[string]string{"mountpointMemoryLimit": "640Mi"}})
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
		if !strings.Contains(msg, "OOM-killed at its memory limit 640Mi") {
			return fmt.Sprintf("no MountOOMKilled event naming the 640Mi limit yet (%q): %s", msg, podEvents(w))
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

// testHeadroom: mountpointPod.headroom.enabled, and the node filled to capacity by an ordinary
// pod (priority 0) around the headroom pod. A workload's Mountpoint Pod preempts the headroom
// pod, not the pod filling the node, and the workload starts; the headroom pod that the
// DaemonSet makes again waits, Pending, and runs again once the workload and its Mountpoint Pod
// are gone.
func testHeadroom(t *testing.T) {
	installChart(t, "--set", "mountpointPod.headroom.enabled=true")
	defer installChart(t) // the suite's values again (no headroom)
	setMode(t, "pod")
	ctx := context.Background()
	headroom := func() []corev1.Pod {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(mpNamespace), client.MatchingLabels{"app": "mountpoint-headroom"}))
		return pods.Items
	}
	var first corev1.Pod
	harness.Eventually(t, 2*time.Minute, func() string {
		for _, p := range headroom() {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				first = p
				return ""
			}
		}
		return fmt.Sprintf("no headroom pod running on the pod-mode node: %d pods", len(headroom()))
	})
	ns := newNamespace(t, "headroom")
	bucket := "headroom-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	filler := fillNode(t, ns, resource.MustParse("16Mi"), 0)

	w := workload(t, ns, "w", claim, podOpts{})
	waitRunning(t, 2*time.Minute, w)
	mustRun(t)(execIn(t, w, "printf 'room\\n' > /data/room.txt"))
	if got := string(env.s3.GetObject(t, bucket, "room.txt")); got != "room\n" {
		t.Errorf("object written = %q", got)
	}
	var cur corev1.Pod
	harness.Must(t, env.c.Get(ctx, client.ObjectKeyFromObject(filler), &cur))
	if cur.Status.Phase != corev1.PodRunning || cur.DeletionTimestamp != nil {
		t.Errorf("the pod filling the node was preempted (%s): the headroom pod should have gone first", cur.Status.Phase)
	}
	harness.Eventually(t, time.Minute, func() string {
		for _, p := range headroom() {
			if p.UID == first.UID {
				return "the first headroom pod is still there"
			}
			if p.Status.Phase == corev1.PodRunning {
				return "a headroom pod runs although the Mountpoint Pod took its room"
			}
		}
		return ""
	})
	deletePods(t, w)
	harness.Eventually(t, 2*time.Minute, func() string {
		for _, p := range headroom() {
			if p.Status.Phase == corev1.PodRunning {
				return ""
			}
		}
		return "no headroom pod running again after the Mountpoint Pod left"
	})
	deletePods(t, filler)
}
