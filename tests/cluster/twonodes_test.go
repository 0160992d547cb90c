package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testTwoNodes brings up a second node (rig.AddNode: its own network address and namespace,
// mount namespace, kubelet, containerd, cgroups and systemd user manager; registered in pod
// mode) beside the first (systemd mode), and runs what one node cannot show: a workload spread
// over both mounts each replica in its node's mode; the node plugins' rights between the two
// real node identities; the upstream storage e2e specs that need two nodes; a drain of the systemd node moves its workload (and the chart's
// controllers) to the pod node with its data; and the pod node switched off with live mounts,
// then deleted: the controller cleans up its attachments and Mountpoint Pods, and the first
// node's mounts serve on. The second node is gone at the end (its Node object too).
func testTwoNodes(t *testing.T) {
	ctx := context.Background()
	// The suite's values again, both modes in use: the take-over steps before this one leave the
	// release with the modes Scality's release ran (pod only after 2.x), and a node labelled
	// systemd then refuses every publish with Unavailable ("Helm mounter.modesInUse lacks
	// systemd"), as it should.
	installChart(t)
	setMode(t, "systemd")
	start := time.Now()
	t.Cleanup(func() { retireSecondNode(t) })
	if err := rig.AddNode(ctx, testLog{t}); err != nil {
		t.Fatalf("second node: %v", err)
	}
	t.Logf("second node %s Ready in %.1fs", rig.SecondNodeName, time.Since(start).Seconds())
	// Its node plugin: the DaemonSet's second pod, which finds the node in pod mode.
	harness.Eventually(t, 3*time.Minute, func() string {
		var n corev1.Node
		if err := env.c.Get(ctx, client.ObjectKey{Name: rig.SecondNodeName}, &n); err != nil {
			return err.Error()
		}
		if got := n.Annotations[nodemode.AnnotationEffectiveMode]; got != "pod" {
			return fmt.Sprintf("node %s: effective mode %q, want pod; its pods: %s", n.Name, got, podsOn(t, rig.SecondNodeName))
		}
		var ds appsv1.DaemonSet
		harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-node"}, &ds))
		if ds.Status.NumberReady != 2 {
			return fmt.Sprintf("%d node plugins ready, want 2", ds.Status.NumberReady)
		}
		return ""
	})
	for _, s := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"spread", testSpread},
		{"rights-between-nodes", testRightsBetweenNodes},
		// The upstream specs a single node skips ("at least 2 nodes"): pods of one volume, or
		// of two, on different nodes, here one in each mode.
		{"e2e", func(t *testing.T) { runE2E(t, "e2e-two-nodes", "on different node") }},
		{"drain-to-pod-node", testDrainToPodNode},
		{"node-lost", testNodeLost},
	} {
		if !t.Run(s.name, s.f) {
			return
		}
	}
}

// retireSecondNode switches the second node off (if a scenario did not) and deletes its Node,
// then waits until nothing of it is left in the cluster: its pods collected, one node plugin.
func retireSecondNode(t *testing.T) {
	ctx := context.Background()
	if err := rig.StopNode(testLog{t}); err != nil {
		t.Errorf("stop the second node: %v", err)
	}
	if err := env.cs.CoreV1().Nodes().Delete(ctx, rig.SecondNodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete node %s: %v", rig.SecondNodeName, err)
	}
	harness.Eventually(t, 4*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods))
		var left []string
		for _, p := range pods.Items {
			if p.Spec.NodeName == rig.SecondNodeName {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		if len(left) > 0 {
			return fmt.Sprintf("pods of the deleted node %s not collected yet: %v", rig.SecondNodeName, left)
		}
		return ""
	})
	waitRollout(t)
}

// podsOn describes the pods on a node (for failure messages).
func podsOn(t *testing.T, node string) string {
	var pods corev1.PodList
	harness.Must(t, env.c.List(context.Background(), &pods))
	var out []string
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == node {
			out = append(out, fmt.Sprintf("%s/%s %s (%s)", p.Namespace, p.Name, p.Status.Phase, podEvents(p)))
		}
	}
	return strings.Join(out, "; ")
}

// onNode pins a pod to a node (as a nodeSelector: the scheduler still places it).
func onNode(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return p
}

// secondNodeMounts lists the mount-s3 mounts below the second node's kubelet directory, from
// its own mount table.
func secondNodeMounts(t *testing.T) []string {
	t.Helper()
	root := rig.SecondNodeRoot()
	if root == "" {
		t.Fatal("the second node is not up")
	}
	entries, err := mounttable.Table{Path: filepath.Join(filepath.Dir(root), "mountinfo")}.List()
	harness.Must(t, err)
	var out []string
	for _, e := range entries {
		if mounttable.IsMountS3(&e) && strings.HasPrefix(e.MountPoint, rig.KubeletDir+"/") {
			out = append(out, e.MountPoint)
		}
	}
	return out
}

// unitsOf lists the mount-s3 units a node's user manager knows.
func unitsOf(t *testing.T, systemctl func(...string) (string, error)) []string {
	t.Helper()
	out, err := systemctl("list-units", "--all", "--plain", "--no-legend", "mount-s3-*")
	harness.Must(t, err)
	var units []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			units = append(units, f[0])
		}
	}
	return units
}

// placement lists, per node, the Mountpoint Pods and the attachments.
func placement(t *testing.T) (mpPods, attachments map[string][]string) {
	t.Helper()
	mpPods, attachments = map[string][]string{}, map[string][]string{}
	var pods corev1.PodList
	harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(mpNamespace)))
	for _, p := range pods.Items {
		if p.Labels["app.kubernetes.io/component"] != "headroom" {
			mpPods[p.Spec.NodeName] = append(mpPods[p.Spec.NodeName], p.Name)
		}
	}
	var atts crdv2.MountpointS3PodAttachmentList
	harness.Must(t, env.c.List(context.Background(), &atts))
	for _, a := range atts.Items {
		attachments[a.Spec.NodeName] = append(attachments[a.Spec.NodeName], a.Name)
	}
	return mpPods, attachments
}

// testSpread: a Deployment of two replicas that may not share a node, on one volume. The
// replica on the first node is mounted by a systemd unit of that node's manager (no Mountpoint
// Pod there), the one on the second by a Mountpoint Pod on the second node (no unit there);
// each reads what the other wrote. Once the Deployment is gone neither node holds anything.
func testSpread(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "spread")
	bucket := "spread-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	tmpl := workloadSpec(ns, "spread", claim, podOpts{command: `printf 'from %s\n' "$NODE" > "/data/from-$NODE" && ` + idle})
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	tmpl.Labels = map[string]string{"app": "spread"}
	tmpl.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, TopologyKey: corev1.LabelHostname,
		}},
	}}
	dep := deploymentOf(tmpl, 2)
	harness.Must(t, env.c.Create(ctx, dep))
	byNode := map[string]*corev1.Pod{}
	harness.Eventually(t, 3*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(tmpl.Labels)))
		clear(byNode)
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
				byNode[p.Spec.NodeName] = p
			}
		}
		if byNode[rig.NodeName] == nil || byNode[rig.SecondNodeName] == nil {
			var events []string
			for i := range pods.Items {
				events = append(events, pods.Items[i].Name+": "+podEvents(&pods.Items[i]))
			}
			return fmt.Sprintf("running replicas by node: %v; %v", slices.Collect(maps.Keys(byNode)), events)
		}
		return ""
	})
	a, b := byNode[rig.NodeName], byNode[rig.SecondNodeName]
	harness.Eventually(t, time.Minute, func() string {
		return readsBoth(t, a, b)
	})

	units, unitsB := unitsOf(t, rig.Systemctl), unitsOf(t, rig.SecondNodeSystemctl)
	mounts, err := driverMounts()
	harness.Must(t, err)
	mountsB := secondNodeMounts(t)
	mpPods, atts := placement(t)
	t.Logf("first node: units %v, mounts %v; second node: units %v, mounts %v; Mountpoint Pods %v; attachments %v", units, mounts, unitsB, mountsB, mpPods, atts)
	if len(units) != 1 || len(unitsB) != 0 {
		t.Errorf("want one mount-s3 unit on %s (systemd mode) and none on %s (pod mode): %v, %v", rig.NodeName, rig.SecondNodeName, units, unitsB)
	}
	if len(mpPods[rig.SecondNodeName]) != 1 || len(mpPods) != 1 || len(atts[rig.SecondNodeName]) != 1 || len(atts) != 1 {
		t.Errorf("want one Mountpoint Pod and one attachment, both on %s: Mountpoint Pods %v, attachments %v", rig.SecondNodeName, mpPods, atts)
	}
	if !slices.ContainsFunc(mounts, func(m string) bool { return strings.Contains(m, string(a.UID)) }) {
		t.Errorf("no mount-s3 mount of replica %s in %s's mount table: %v", a.Name, rig.NodeName, mounts)
	}
	if !slices.ContainsFunc(mountsB, func(m string) bool { return strings.Contains(m, string(b.UID)) }) {
		t.Errorf("no mount-s3 mount of replica %s in %s's mount table: %v", b.Name, rig.SecondNodeName, mountsB)
	}
	if slices.ContainsFunc(mounts, func(m string) bool { return strings.Contains(m, string(b.UID)) }) {
		t.Errorf("the second node's mount of %s shows in the first node's mount table: %v", b.Name, mounts)
	}

	harness.Must(t, env.c.Delete(ctx, dep))
	expectBothClean(t)
}

// deploymentOf is a Deployment of replicas copies of the pod tmpl (its name, namespace,
// labels and spec).
func deploymentOf(tmpl *corev1.Pod, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: tmpl.Name, Namespace: tmpl.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec},
		},
	}
}

// readsBoth returns "" when each replica reads the file the other wrote.
func readsBoth(t *testing.T, a, b *corev1.Pod) string {
	for _, pair := range [][2]*corev1.Pod{{a, b}, {b, a}} {
		want := "from " + pair[1].Spec.NodeName + "\n"
		out, err := execIn(t, pair[0], "cat /data/from-"+pair[1].Spec.NodeName)
		if err != nil || out != want {
			return fmt.Sprintf("%s on %s reads %q (%v), want %q", pair[0].Name, pair[0].Spec.NodeName, out, err, want)
		}
	}
	return ""
}

// expectBothClean waits until neither node holds anything of the driver: no mount, unit or
// credential file on either, no Mountpoint Pod or attachment.
func expectBothClean(t *testing.T) {
	t.Helper()
	expectClean(t)
	harness.Eventually(t, 2*time.Minute, func() string {
		if m, u := secondNodeMounts(t), unitsOf(t, rig.SecondNodeSystemctl); len(m)+len(u) > 0 {
			return fmt.Sprintf("left on %s: mounts %v, units %v", rig.SecondNodeName, m, u)
		}
		return ""
	})
}

// testRightsBetweenNodes: each node plugin, with its own token, is refused on the other node's
// Node object and on a pod running on the other node, though RBAC allows both; on its own node
// the same writes pass. (testNodeScopedWrites shows every rule against a Node object without a
// kubelet; here both identities are real.)
func testRightsBetweenNodes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "rights")
	plugins := map[string]kubernetes.Interface{
		rig.NodeName:       nodePluginClientOn(t, rig.NodeName, ""),
		rig.SecondNodeName: nodePluginClientOn(t, rig.SecondNodeName, rig.SecondNodeRoot()),
	}
	victims := map[string]*corev1.Pod{}
	for _, node := range []string{rig.NodeName, rig.SecondNodeName} {
		p := onNode(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim-" + strings.TrimPrefix(node, "s3csi-"), Namespace: ns},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "c", Image: rig.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sh", "-c", idle}}}}}, node)
		harness.Must(t, env.c.Create(ctx, p))
		victims[node] = p
	}
	waitRunning(t, 2*time.Minute, victims[rig.NodeName], victims[rig.SecondNodeName])
	for self, plugin := range plugins {
		other := rig.NodeName
		if self == rig.NodeName {
			other = rig.SecondNodeName
		}
		var node corev1.Node
		harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: other}, &node))
		mode := node.Annotations[nodemode.AnnotationEffectiveMode]
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodemode.AnnotationEffectiveMode: mode}}})
		_, err := plugin.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, patch, metav1.PatchOptions{})
		expectRefused(t, fmt.Sprintf("%s's plugin annotates Node %s", self, other), "may change only its own Node, not "+other, err)
		err = plugin.CoreV1().Pods(ns).Delete(ctx, victims[other].Name, metav1.DeleteOptions{})
		expectRefused(t, fmt.Sprintf("%s's plugin deletes pod %s on %s", self, victims[other].Name, other),
			fmt.Sprintf("may delete only pods on its own node, not %s/%s (on %s)", ns, victims[other].Name, other), err)
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(victims[other]), &corev1.Pod{}); err != nil {
			t.Errorf("pod %s after a refused delete: %v", victims[other].Name, err)
		}
		// Its own: the annotation it owns, a pod on its node.
		harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: self}, &node))
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodemode.AnnotationEffectiveMode: node.Annotations[nodemode.AnnotationEffectiveMode]}}})
		if _, err := plugin.CoreV1().Nodes().Patch(ctx, self, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("%s's plugin sets its mode annotation on its own Node: %v", self, err)
		}
	}
	for self, plugin := range plugins {
		if err := plugin.CoreV1().Pods(ns).Delete(ctx, victims[self].Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("%s's plugin deletes a pod on its own node: %v", self, err)
		}
	}
}

// expectRefused fails t unless err is an admission refusal whose message contains want.
func expectRefused(t *testing.T, what, want string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want refused", what)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %v, want Forbidden", what, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: refused with %q, want a message containing %q", what, err, want)
	default:
		t.Logf("%s: refused: %v", what, err)
	}
}

// testDrainToPodNode: a writer of a one-replica Deployment runs on the first node (systemd
// mode). `kubectl drain` of that node, as an administrator runs it (every pod but the
// DaemonSets', the chart's controllers too), moves it to the second node, where a Mountpoint
// Pod mounts it: it reads what its predecessor wrote, every file the predecessor began is whole
// in the bucket, and the first node holds nothing of the volume any more.
func testDrainToPodNode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "move")
	bucket := "move-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	// The writer's files carry its pod's name, so that the predecessor's and the successor's
	// never mix.
	tmpl := workloadSpec(ns, "mover", claim, podOpts{command: `i=0; trap 'echo "wrote=$i"; exit 0' TERM
printf 'first\n' > "/data/first-$HOSTNAME"
while true; do n=$((i+1)); printf '%s-%06d-0123456789abcdefghijklmnopqrstuvwxyz\n' "$HOSTNAME" $n > "/data/$HOSTNAME-$n" || exit 1; i=$n; sleep 0.2; done`})
	tmpl.Labels = map[string]string{"app": "mover"}
	tmpl.Spec.NodeSelector = nil
	dep := deploymentOf(tmpl, 1)
	// On the first node: the second cordoned while the Deployment starts.
	mustRun(t)(kubectl(t, "cordon", rig.SecondNodeName))
	harness.Must(t, env.c.Create(ctx, dep))
	first := runningOf(t, ns, tmpl.Labels, "")
	mustRun(t)(kubectl(t, "uncordon", rig.SecondNodeName))
	if first.Spec.NodeName != rig.NodeName {
		t.Fatalf("the writer runs on %s, want %s", first.Spec.NodeName, rig.NodeName)
	}
	if u := unitsOf(t, rig.Systemctl); len(u) != 1 {
		t.Fatalf("want the writer's mount-s3 unit on %s: %v", rig.NodeName, u)
	}
	time.Sleep(3 * time.Second)

	t.Cleanup(func() { _, _ = kubectl(t, "uncordon", rig.NodeName) })
	out, err := kubectl(t, "drain", rig.NodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--grace-period=10", "--timeout=4m")
	if err != nil {
		t.Fatalf("drain %s: %v\n%s", rig.NodeName, err, out)
	}
	second := runningOf(t, ns, tmpl.Labels, first.Name)
	if second.Spec.NodeName != rig.SecondNodeName {
		t.Fatalf("after the drain the writer runs on %s, want %s", second.Spec.NodeName, rig.SecondNodeName)
	}
	if got := mustRun(t)(execIn(t, second, "cat /data/first-"+first.Name)); got != "first\n" {
		t.Errorf("the moved writer reads %q from its predecessor's file", got)
	}
	// Every file the predecessor began is whole: it ended between two writes (SIGTERM's trap).
	keys := env.s3.ListKeys(t, bucket)
	n := 0
	for slices.Contains(keys, fmt.Sprintf("%s-%d", first.Name, n+1)) {
		n++
	}
	checkWriter(t, bucket, first.Name, n)
	if all := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !strings.HasPrefix(k, first.Name+"-") }); len(all) != n {
		t.Errorf("the predecessor's files are not 1..%d without a gap: %v", n, all)
	}
	harness.Eventually(t, 2*time.Minute, func() string {
		mounts, err := driverMounts()
		harness.Must(t, err)
		if u := unitsOf(t, rig.Systemctl); len(u)+len(mounts) > 0 {
			return fmt.Sprintf("left on the drained %s: units %v, mounts %v", rig.NodeName, u, mounts)
		}
		return ""
	})
	mpPods, atts := placement(t)
	if len(mpPods[rig.SecondNodeName]) != 1 || len(mpPods) != 1 || len(atts) != 1 {
		t.Errorf("want the moved writer's Mountpoint Pod and attachment on %s only: %v, %v", rig.SecondNodeName, mpPods, atts)
	}
	mustRun(t)(kubectl(t, "uncordon", rig.NodeName))
	harness.Must(t, env.c.Delete(ctx, dep))
	expectBothClean(t)
}

// runningOf waits for the one running, ready pod of a Deployment other than not, and returns it.
func runningOf(t *testing.T, ns string, labels map[string]string, not string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	harness.Eventually(t, 4*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels(labels)))
		var seen []string
		for i := range pods.Items {
			p := &pods.Items[i]
			seen = append(seen, fmt.Sprintf("%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, podEvents(p)))
			if p.Name != not && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning &&
				len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
				found = p
				return ""
			}
		}
		return fmt.Sprintf("no running pod of %v yet: %v", labels, seen)
	})
	return found
}

// testNodeLost: a writer on each node (the first's through systemd mode, the second's through
// a Mountpoint Pod there). The second node is switched off at once (rig.StopNode: every
// process killed, its mounts gone) and its Node deleted, as the decommissioning of a dead
// machine does. The controller (wherever it was: the drain before moved it to the second
// node) removes the second node's attachments once its pods are collected, and the Mountpoint
// Pod goes; the first node's writer never stops and loses nothing.
func testNodeLost(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "lost")
	bucket := "lost-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	wa := onNode(workloadSpec(ns, "wa", claim, podOpts{command: writerScript("wa")}), rig.NodeName)
	wb := onNode(workloadSpec(ns, "wb", claim, podOpts{command: writerScript("wb")}), rig.SecondNodeName)
	harness.Must(t, env.c.Create(ctx, wa))
	harness.Must(t, env.c.Create(ctx, wb))
	waitRunning(t, 3*time.Minute, wa, wb)
	mpPods, atts := placement(t)
	if len(mpPods[rig.SecondNodeName]) != 1 || len(atts[rig.SecondNodeName]) != 1 {
		t.Fatalf("want a Mountpoint Pod and an attachment on %s: %v, %v", rig.SecondNodeName, mpPods, atts)
	}
	time.Sleep(2 * time.Second)

	harness.Must(t, rig.StopNode(testLog{t}))
	stopped := time.Now()
	before := len(env.s3.ListKeys(t, bucket))
	harness.Must(t, env.cs.CoreV1().Nodes().Delete(ctx, rig.SecondNodeName, metav1.DeleteOptions{}))
	harness.Eventually(t, 5*time.Minute, func() string {
		mpPods, atts := placement(t)
		var p corev1.Pod
		err := env.c.Get(ctx, client.ObjectKeyFromObject(wb), &p)
		if len(mpPods[rig.SecondNodeName])+len(atts[rig.SecondNodeName]) > 0 || !apierrors.IsNotFound(err) {
			return fmt.Sprintf("of the lost node: Mountpoint Pods %v, attachments %v, workload %v", mpPods[rig.SecondNodeName], atts[rig.SecondNodeName], err)
		}
		return ""
	})
	t.Logf("the lost node's attachments and pods are gone %.1fs after it stopped", time.Since(stopped).Seconds())
	// The first node's writer wrote on meanwhile, without a restart.
	if after := len(env.s3.ListKeys(t, bucket)); after <= before {
		t.Errorf("the first node's writer wrote nothing while the second node was lost (%d objects, %d before)", after, before)
	}
	if n := containerRestarts(t, wa); n != 0 {
		t.Errorf("the first node's writer restarted %d times", n)
	}
	checkWriter(t, bucket, "wa", stopWriter(t, wa))
	expectClean(t)
}
