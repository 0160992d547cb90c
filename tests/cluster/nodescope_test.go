package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// otherNode is a Node object with no kubelet behind it: "another node" on the rig's one node.
const otherNode = "s3csi-other-node"

// nodePluginClient returns a client authenticated as the running node plugin: the service
// account token kubelet projected into its pod, read from the node's disk (the image has no
// shell to read it from inside).
func nodePluginClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	return nodePluginClientOn(t, rig.NodeName, "")
}

// nodePluginClientOn is nodePluginClient for the node plugin on node, whose file system this
// process sees under root ("" for the first node's, which is this process's).
func nodePluginClientOn(t *testing.T, node, root string) kubernetes.Interface {
	t.Helper()
	var all corev1.PodList
	harness.Must(t, env.c.List(context.Background(), &all, client.InNamespace(releaseNS), client.MatchingLabels{"app": "s3-csi-node"}))
	var plugins []corev1.Pod
	for _, p := range all.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			plugins = append(plugins, p)
		}
	}
	if len(plugins) != 1 {
		t.Fatalf("%d node plugin pods on %s, want 1", len(plugins), node)
	}
	tokens, err := filepath.Glob(filepath.Join(root+rig.KubeletDir, "pods", string(plugins[0].UID), "volumes", "kubernetes.io~projected", "*", "token"))
	harness.Must(t, err)
	if len(tokens) != 1 {
		t.Fatalf("node plugin pod %s: %d projected tokens on the node, want 1", plugins[0].Name, len(tokens))
	}
	token, err := os.ReadFile(tokens[0])
	harness.Must(t, err)
	admin, err := clientcmd.BuildConfigFromFlags("", rig.Kubeconfig())
	harness.Must(t, err)
	cfg := &rest.Config{Host: admin.Host, BearerToken: strings.TrimSpace(string(token)),
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile}}
	cs, err := kubernetes.NewForConfig(cfg)
	harness.Must(t, err)
	return cs
}

// testNodeScopedWrites checks the chart's admission policy with the node plugin's own token:
// writes to another Node, to its own Node's labels, annotations, taints and schedulability,
// and deleting a pod on another node are refused with a message saying why, though RBAC
// allows them; removing its startup taint (through the code the plugin runs), setting its mode
// annotation and deleting a pod on its own node still work.
func testNodeScopedWrites(t *testing.T) {
	ctx := context.Background()
	// kube-controller-manager type-checks the policy's expressions against the Node and Pod
	// schemas and reports what it finds (a misspelt field, a comparison never true).
	harness.Eventually(t, time.Minute, func() string {
		p, err := env.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "scality-s3-csi-node-scoped-writes", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return "the policy is not type-checked yet"
		}
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("the policy's type checking, %s: %s", w.FieldRef, w.Warning)
		}
		return ""
	})
	plugin := nodePluginClient(t)
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode, Labels: map[string]string{"s3csi-test": "other"}}}
	harness.Must(t, env.c.Create(ctx, other))
	t.Cleanup(func() { _ = env.c.Delete(context.Background(), other) })

	refused := func(what, wantMsg string, err error) {
		t.Helper()
		expectRefused(t, what, wantMsg, err)
	}
	mergePatch := func(node string, patch map[string]any) error {
		b, _ := json.Marshal(patch)
		_, err := plugin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	annotate := func(key, value string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}
	}

	// Another node: nothing, not even the annotation the plugin owns on its own node.
	refused("annotate another Node", "may change only its own Node, not "+otherNode,
		mergePatch(otherNode, annotate(nodemode.AnnotationEffectiveMode, "pod")))
	refused("label another Node", "may change only its own Node",
		mergePatch(otherNode, map[string]any{"metadata": map[string]any{"labels": map[string]string{"node-restriction.kubernetes.io/s3": "yes"}}}))

	// Its own node: only its annotation, only removing its taint.
	refused("label its own Node", "may not change the labels",
		mergePatch(rig.NodeName, map[string]any{"metadata": map[string]any{"labels": map[string]string{"s3csi-test": "steered"}}}))
	refused("set another annotation on its own Node", "may change only the annotation "+nodemode.AnnotationEffectiveMode,
		mergePatch(rig.NodeName, annotate("s3csi-test", "x")))
	refused("cordon its own Node", "may not cordon", mergePatch(rig.NodeName, map[string]any{"spec": map[string]any{"unschedulable": true}}))
	var self corev1.Node
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: rig.NodeName}, &self))
	tainted := append(append([]corev1.Taint{}, self.Spec.Taints...), corev1.Taint{Key: "s3csi-test", Effect: corev1.TaintEffectNoSchedule})
	refused("taint its own Node", "may only remove the taint", mergePatch(rig.NodeName, map[string]any{"spec": map[string]any{"taints": tainted}}))
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: rig.NodeName}, &self))
	if self.Spec.Unschedulable || self.Labels["s3csi-test"] != "" || self.Annotations["s3csi-test"] != "" || len(self.Spec.Taints) != len(tainted)-1 {
		t.Errorf("a refused write changed node %s: unschedulable %v, labels %v, annotations %v, taints %v", rig.NodeName, self.Spec.Unschedulable, self.Labels, self.Annotations, self.Spec.Taints)
	}

	mode := self.Annotations[nodemode.AnnotationEffectiveMode]
	if mode == "" {
		t.Errorf("node %s has no %s annotation: the node plugin's own write did not pass", rig.NodeName, nodemode.AnnotationEffectiveMode)
	}
	if err := mergePatch(rig.NodeName, annotate(nodemode.AnnotationEffectiveMode, mode)); err != nil {
		t.Errorf("set its mode annotation on its own Node: %v", err)
	}
	// The startup taint, put back by an administrator, removed by the plugin's own code.
	startup := corev1.Taint{Key: nodemode.TaintAgentNotReady, Effect: corev1.TaintEffectNoExecute}
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": append(append([]corev1.Taint{}, self.Spec.Taints...), startup)}})
	_, err := env.cs.CoreV1().Nodes().Patch(ctx, rig.NodeName, types.MergePatchType, b, metav1.PatchOptions{})
	harness.Must(t, err)
	if err := nodemode.RemoveStartupTaint(ctx, plugin, rig.NodeName, 30*time.Second); err != nil {
		t.Errorf("the plugin's own startup taint removal: %v", err)
	}
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: rig.NodeName}, &self))
	for _, taint := range self.Spec.Taints {
		if taint.Key == nodemode.TaintAgentNotReady {
			t.Errorf("node %s still has taint %s", rig.NodeName, taint.Key)
			_, _ = env.cs.CoreV1().Nodes().Patch(ctx, rig.NodeName, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/taints"}]`), metav1.PatchOptions{})
		}
	}

	// Pods: only those on its own node.
	ns := newNamespace(t, "node-scope")
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: otherNode, Containers: []corev1.Container{{Name: "c", Image: rig.BusyboxImage}}}}
	harness.Must(t, env.c.Create(ctx, elsewhere))
	refused("delete a pod on another node", fmt.Sprintf("may delete only pods on its own node, not %s/elsewhere (on %s)", ns, otherNode),
		plugin.CoreV1().Pods(ns).Delete(ctx, "elsewhere", metav1.DeleteOptions{}))
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: ns},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"s3csi-test": "nowhere"}, Containers: []corev1.Container{{Name: "c", Image: rig.BusyboxImage}}}}
	harness.Must(t, env.c.Create(ctx, pending))
	refused("delete a pod on no node", "(on no node)", plugin.CoreV1().Pods(ns).Delete(ctx, "pending", metav1.DeleteOptions{}))
	for _, name := range []string{"elsewhere", "pending"} {
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("pod %s after a refused delete: %v", name, err)
		}
	}
	local := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: rig.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: rig.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sh", "-c", idle}}}}}
	harness.Must(t, env.c.Create(ctx, local))
	if err := plugin.CoreV1().Pods(ns).Delete(ctx, "local", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete a pod on its own node: %v", err)
	}
	// Deleting the pods on the node that does not exist, as an administrator, so that the
	// namespace can go.
	for _, name := range []string{"elsewhere", "pending"} {
		_ = env.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
}
