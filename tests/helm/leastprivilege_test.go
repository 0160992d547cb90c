package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
	"github.com/s3csi/s3-csi-driver/tests/scality"
)

// TestNodeScopedWritesPolicy applies the chart's RBAC and its admission policy to a real
// kube-apiserver and acts as the node plugin's service account (impersonated, with the node
// claim a pod-bound token carries): RBAC lets it patch every Node and delete every pod, the
// policy lets it change only its own Node's mode annotation and startup taint, and delete only
// pods on its own node (docs/adr/0009-node-scoped-writes.md). The cluster suite repeats the
// main cases with the running plugin's real token.
func TestNodeScopedWritesPolicy(t *testing.T) {
	k := apiServer(t)
	a := newApplier(t, k)
	admin, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var m mode
	for _, mm := range modes {
		if mm.restartPods {
			m = mm
		}
	}
	_, objs := m.render(t)
	ensureNamespaces(t, k, objs)
	var applied []*unstructured.Unstructured
	t.Cleanup(func() {
		for _, o := range applied {
			_ = a.delete(o)
		}
	})
	policies := 0
	for _, o := range objs {
		kind := o.GetKind()
		if strings.HasPrefix(kind, "ValidatingAdmissionPolicy") {
			policies++
		}
		if strings.HasPrefix(kind, "ValidatingAdmissionPolicy") || strings.Contains(kind, "Role") || kind == "ServiceAccount" {
			if err := a.apply(o, false); err != nil {
				t.Fatalf("%s %s: %v", kind, o.GetName(), err)
			}
			applied = append(applied, o)
		}
	}
	if policies != 2 {
		t.Fatalf("the chart renders %d admission policy objects, want the policy and its binding", policies)
	}

	startup := corev1.Taint{Key: "s3.csi.scality.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Taint{Key: "team", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "1"}, Annotations: map[string]string{"keep": "me"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{other, startup}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	const ns = "team-a"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for name, node := range map[string]string{"on-a": "node-a", "on-b": "node-b", "nowhere": ""} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}

	as := func(user, node string) kubernetes.Interface {
		cfg := rest.CopyConfig(k.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
		if node != "" {
			cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	pluginUser := fmt.Sprintf("system:serviceaccount:%s:s3-csi-node", namespace)
	plugin := as(pluginUser, "node-a")
	patch := func(cs kubernetes.Interface, node string, body map[string]any) error {
		b, _ := json.Marshal(body)
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	annotation := func(key string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: "pod"}}}
	}
	mode := annotation("s3.csi.scality.com/effective-mounter")

	// The policy takes effect a moment after it is created.
	deadline := time.Now().Add(30 * time.Second)
	for patch(plugin, "node-b", mode) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the policy never refused a write to another Node")
		}
		_ = patch(admin, "node-b", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"s3.csi.scality.com/effective-mounter": nil}}})
		time.Sleep(200 * time.Millisecond)
	}

	cases := []struct {
		what    string
		do      func() error
		wantErr string // "" when allowed
	}{
		{"its mode annotation on another Node", func() error { return patch(plugin, "node-b", mode) }, "may change only its own Node, not node-b"},
		{"a label on another Node", func() error {
			return patch(plugin, "node-b", map[string]any{"metadata": map[string]any{"labels": map[string]any{"node-restriction.kubernetes.io/x": "y"}}})
		}, "may change only its own Node, not node-b"},
		{"a label on its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"metadata": map[string]any{"labels": map[string]any{"zone": "2"}}})
		}, "may not change the labels of Node node-a"},
		{"removing a label of its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"metadata": map[string]any{"labels": map[string]any{"zone": nil}}})
		}, "may not change the labels"},
		{"another annotation on its own Node", func() error { return patch(plugin, "node-a", annotation("other")) }, "may change only the annotation s3.csi.scality.com/effective-mounter"},
		{"removing another annotation of its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"keep": nil}}})
		}, "may change only the annotation"},
		{"cordoning its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"spec": map[string]any{"unschedulable": true}})
		}, "may not cordon Node node-a"},
		{"adding a taint to its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"spec": map[string]any{"taints": []corev1.Taint{other, startup, {Key: "x", Effect: corev1.TaintEffectNoExecute}}}})
		}, "may only remove the taint s3.csi.scality.com/agent-not-ready"},
		{"removing another taint of its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"spec": map[string]any{"taints": []corev1.Taint{startup}}})
		}, "may only remove the taint"},
		{"a finalizer on its own Node", func() error {
			return patch(plugin, "node-a", map[string]any{"metadata": map[string]any{"finalizers": []string{"x/y"}}})
		}, "may not cordon Node node-a or change its provider ID, pod CIDRs, finalizers or owners"},
		{"its status", func() error {
			_, err := plugin.CoreV1().Nodes().PatchStatus(ctx, "node-a", []byte(`{"status":{"phase":"Running"}}`))
			return err
		}, "forbidden"},
		{"deleting a pod on another node", func() error { return plugin.CoreV1().Pods(ns).Delete(ctx, "on-b", metav1.DeleteOptions{}) }, "may delete only pods on its own node, not team-a/on-b (on node-b)"},
		{"deleting a pod on no node", func() error { return plugin.CoreV1().Pods(ns).Delete(ctx, "nowhere", metav1.DeleteOptions{}) }, "not team-a/nowhere (on no node)"},
		{"its mode annotation, credentials naming no node", func() error { return patch(as(pluginUser, ""), "node-a", mode) }, "credentials name no node"},
		// What the plugin does.
		{"its mode annotation on its own Node", func() error { return patch(plugin, "node-a", mode) }, ""},
		{"removing its startup taint", func() error {
			n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			var keep []corev1.Taint
			for _, taint := range n.Spec.Taints {
				if taint.Key != startup.Key {
					keep = append(keep, taint)
				}
			}
			return patch(plugin, "node-a", map[string]any{"spec": map[string]any{"taints": keep}})
		}, ""},
		{"deleting a pod on its own node", func() error { return plugin.CoreV1().Pods(ns).Delete(ctx, "on-a", metav1.DeleteOptions{}) }, ""},
		// Anyone else is not concerned (here an administrator).
		{"an administrator labelling a Node", func() error {
			return patch(admin, "node-b", map[string]any{"metadata": map[string]any{"labels": map[string]any{"zone": "3"}}})
		}, ""},
	}
	for _, c := range cases {
		err := c.do()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want allowed", c.what, err)
		case c.wantErr != "" && err == nil:
			t.Errorf("%s: allowed, want refused", c.what)
		case c.wantErr != "" && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: %v, want Forbidden", c.what, err)
		case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
			t.Errorf("%s: refused with %q, want a message containing %q", c.what, err, c.wantErr)
		}
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taints := map[string]bool{}
	for _, taint := range n.Spec.Taints {
		taints[taint.Key] = true
	}
	if n.Labels["zone"] != "1" || n.Annotations["keep"] != "me" || n.Annotations["other"] != "" || n.Spec.Unschedulable || len(n.Finalizers) > 0 ||
		!taints["team"] || taints["x"] || taints[startup.Key] {
		t.Errorf("node-a after the refused writes: labels %v, annotations %v, unschedulable %v, taints %v", n.Labels, n.Annotations, n.Spec.Unschedulable, n.Spec.Taints)
	}
}

// TestPublishSecretScopeValue: the node plugin's --node-publish-secret-scope is
// node.publishSecretScope when set; empty, with a cluster: claim on a new install, any over a
// release whose node DaemonSet predates the flag (Scality's charts, earlier releases), so the
// upgrade refuses no volume that mounted before it, and what the release's DaemonSet had over
// this chart's; the notes say when it is any. Offline, empty is refused (TestUpgradeFromScality).
func TestPublishSecretScopeValue(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	kubeconfig := k.Kubeconfig(t, "helm-scope", "system:masters")
	helm := func(args ...string) (string, error) {
		return harness.Helm(t, append(args, "--kubeconfig", kubeconfig)...)
	}
	m := modes[0]
	scope := func(manifest string) string {
		objs, err := harness.DecodeManifests(manifest)
		harness.Must(t, err)
		var got []string
		for _, ctr := range typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node")).Spec.Template.Spec.Containers {
			for _, a := range ctr.Args {
				if v, ok := strings.CutPrefix(a, "--node-publish-secret-scope="); ok {
					got = append(got, ctr.Name+":"+v)
				}
			}
		}
		return strings.Join(got, ",")
	}
	// dryRun renders verb (install or upgrade) with the cluster and returns the manifest and notes.
	dryRun := func(verb, rel, ns string, args ...string) (string, string) {
		out, err := helm(append([]string{verb, rel, harness.ChartDir(), "-n", ns, "--dry-run=server", "-o", "json", "--values", m.valuesFile(), "--set", "crd.install=false",
			"--set-json", "controller.provisioner.secretNamespaces=[]"}, args...)...)
		harness.Must(t, err)
		return dryRunOutput(t, out)
	}
	for _, c := range []struct {
		name  string
		args  []string
		want  string
		notes bool
	}{
		{"new install", nil, "claim", false},
		{"new install, any", []string{"--set", "node.publishSecretScope=any"}, "any", true},
	} {
		manifest, notes := dryRun("install", release, "scope-new", c.args...)
		if got := scope(manifest); got != "s3-plugin:"+c.want {
			t.Errorf("%s: --node-publish-secret-scope %s, want s3-plugin:%s", c.name, got, c.want)
		}
		if got := strings.Contains(notes, "node-publish Secrets may live in any namespace"); got != c.notes {
			t.Errorf("%s: notes warn of any namespace: %v, want %v:\n%s", c.name, got, c.notes, notes)
		}
	}
	// Over Scality's 1.2.0 release (no flag): any, kept as the notes say; asked: claim.
	chart, err := scality.Chart(t.TempDir(), scality.R120)
	harness.Must(t, err)
	if out, err := helm("install", "scality", chart, "-n", "scope-scality", "--create-namespace"); err != nil {
		t.Fatalf("install Scality's 1.2.0: %v\n%s", err, out)
	}
	manifest, notes := dryRun("upgrade", "scality", "scope-scality")
	if got := scope(manifest); got != "s3-plugin:any" || !strings.Contains(notes, "kept from\nbefore this upgrade") {
		t.Errorf("over Scality's release: %s, notes:\n%s\nwant s3-plugin:any, said kept", got, notes)
	}
	if manifest, _ := dryRun("upgrade", "scality", "scope-scality", "--set", "node.publishSecretScope=claim"); scope(manifest) != "s3-plugin:claim" {
		t.Errorf("over Scality's release, claim asked: %s", scope(manifest))
	}
	if out, err := helm("uninstall", "scality", "-n", "scope-scality", "--wait"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	// Over this chart's release with claim: claim stays.
	if out, err := helm("install", release, harness.ChartDir(), "-n", "scope-ours", "--create-namespace", "--values", m.valuesFile(), "--set", "crd.install=false",
		"--set", "node.publishSecretScope=claim", "--set-json", "controller.provisioner.secretNamespaces=[]", "--set", "mountpointPod.createNamespace=false"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if manifest, _ := dryRun("upgrade", release, "scope-ours", "--set", "mountpointPod.createNamespace=false"); scope(manifest) != "s3-plugin:claim" {
		t.Errorf("over this chart's release with claim: %s, want it kept", scope(manifest))
	}
	_, err = harness.HelmTemplate(t, release, namespace, "--values", m.valuesFile(), "--set", "node.publishSecretScope=everyone")
	if err == nil || !strings.Contains(err.Error(), "publishSecretScope") {
		t.Errorf("node.publishSecretScope=everyone: %v, want a schema error naming the value", err)
	}
}

// TestSecretNamespacesDefault: with controller.provisioner.secretNamespaces unset and a
// cluster, a new install lets the provisioner read no Secret; an upgrade over a release whose
// provisioner ClusterRole is not this chart's (Scality's charts, whose controller read Secrets
// everywhere) keeps every namespace; one over this chart's keeps what its ClusterRole had; a
// list set explicitly wins either way.
func TestSecretNamespacesDefault(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	kubeconfig := k.Kubeconfig(t, "helm-secretns", "system:masters")
	m := modes[0] // systemd: secretNamespaces unset
	grants := func(manifest string) (cluster bool, roles []string) {
		objs, err := harness.DecodeManifests(manifest)
		harness.Must(t, err)
		for _, cr := range find(objs, "ClusterRole", "") {
			for _, r := range typed[rbacv1.ClusterRole](t, cr).Rules {
				cluster = cluster || slices.Contains(r.Resources, "secrets")
			}
		}
		for _, r := range find(objs, "Role", "scality-s3-csi-provisioner-secrets") {
			roles = append(roles, r.GetNamespace())
		}
		return cluster, roles
	}
	dryRun := func(verb, rel, ns string, args ...string) string {
		out, err := harness.Helm(t, append([]string{verb, rel, harness.ChartDir(), "-n", ns, "--dry-run=server", "-o", "json", "--kubeconfig", kubeconfig, "--values", m.valuesFile(),
			"--set", "crd.install=false", "--set", "node.publishSecretScope=claim", "--set", "mountpointPod.createNamespace=false"}, args...)...)
		harness.Must(t, err)
		manifest, _ := dryRunOutput(t, out)
		return manifest
	}
	if cluster, roles := grants(dryRun("install", release, "secretns-new")); cluster || roles != nil {
		t.Errorf("new install: Secrets everywhere %v, Roles in %v; want none", cluster, roles)
	}
	chart, err := scality.Chart(t.TempDir(), scality.R200)
	harness.Must(t, err)
	if out, err := harness.Helm(t, "install", "scality", chart, "-n", "secretns-scality", "--create-namespace", "--kubeconfig", kubeconfig); err != nil {
		t.Fatalf("install Scality's 2.0.0: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name, verb, rel, ns string
		args                []string
		cluster             bool
		roles               []string
	}{
		{"over Scality's release", "upgrade", "scality", "secretns-scality", []string{"--take-ownership"}, true, nil},
		{"over Scality's, list set", "upgrade", "scality", "secretns-scality", []string{"--take-ownership", "--set", "controller.provisioner.secretNamespaces={storage}"}, false, []string{"storage"}},
		{"over Scality's, none set", "upgrade", "scality", "secretns-scality", []string{"--take-ownership", "--set-json", "controller.provisioner.secretNamespaces=[]"}, false, nil},
	} {
		cluster, roles := grants(dryRun(c.verb, c.rel, c.ns, c.args...))
		if cluster != c.cluster || !slices.Equal(roles, c.roles) {
			t.Errorf("%s: Secrets everywhere %v, Roles in %v; want %v, %v", c.name, cluster, roles, c.cluster, c.roles)
		}
	}
}

// TestControllerSeparation: the CSI controller container, which parses S3 responses, gets no
// service account token (the pod's automount is off; csi-provisioner mounts a projected token);
// the Pod Reconciler runs in a Deployment of its own with a service account of its own (what
// each account may do: TestRBAC); and with s3.credentials.controllerSecretName the CSI
// controller gets its own credentials while the node plugin keeps the nodes'.
func TestControllerSeparation(t *testing.T) {
	m := modes[2] // mixed: pod mode in use, so the Pod Reconciler runs too
	_, objs := m.render(t, "--set", "s3.credentials.secretName=s3-data", "--set", "s3.credentials.controllerSecretName=s3-buckets")
	dep := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller")).Spec.Template.Spec
	if dep.AutomountServiceAccountToken == nil || *dep.AutomountServiceAccountToken {
		t.Error("the controller pod automounts its service account token into every container")
	}
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	mounts := map[string]bool{}
	for _, c := range dep.Containers {
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == tokenDir {
				mounts[c.Name] = true
			}
		}
	}
	want := map[string]bool{"csi-provisioner": true}
	if !maps.Equal(mounts, want) {
		t.Errorf("containers with the API token: %v, want %v", mounts, want)
	}
	rec := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-pod-reconciler")).Spec.Template.Spec
	if rec.ServiceAccountName == dep.ServiceAccountName || len(rec.Containers) != 1 {
		t.Errorf("the Pod Reconciler shares service account %q with csi-provisioner (%q), or its pod has %d containers", rec.ServiceAccountName, dep.ServiceAccountName, len(rec.Containers))
	}
	secretOf := func(spec corev1.PodSpec, container string) string {
		for _, c := range spec.Containers {
			if c.Name != container {
				continue
			}
			for _, e := range c.Env {
				if e.Name == "AWS_SECRET_ACCESS_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					return e.ValueFrom.SecretKeyRef.Name
				}
			}
		}
		return ""
	}
	node := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node")).Spec.Template.Spec
	if got := secretOf(node, "s3-plugin"); got != "s3-data" {
		t.Errorf("node plugin credentials from %q, want s3-data", got)
	}
	if got := secretOf(dep, "s3-csi-controller"); got != "s3-buckets" {
		t.Errorf("CSI controller credentials from %q, want s3-buckets", got)
	}
	_, objs = m.render(t, "--set", "s3.credentials.secretName=s3-data")
	dep = typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller")).Spec.Template.Spec
	if got := secretOf(dep, "s3-csi-controller"); got != "s3-data" {
		t.Errorf("without controllerSecretName, CSI controller credentials from %q, want s3-data", got)
	}
}

// TestSidecarsMountOnlyTheSocket: with node.registration=sidecars, the registrar and the
// liveness probe (uid 0) mount the directory of the plugin's socket, not the plugin directory
// with its state and credential files, and the plugin listens where they look.
func TestSidecarsMountOnlyTheSocket(t *testing.T) {
	m := modes[2] // mixed: sidecars
	_, objs := m.render(t)
	spec := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node")).Spec.Template.Spec
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	sidecars := 0
	for _, c := range spec.Containers {
		if c.Name == "s3-plugin" {
			if got, _ := flagValue(c.Args, "endpoint"); got != "unix:///csi/socket/csi.sock" {
				t.Errorf("plugin endpoint %q", got)
			}
			continue
		}
		sidecars++
		for _, vm := range c.VolumeMounts {
			if p := hostPaths[vm.Name]; p != "" && p != m.kubeletPath+"/plugins/s3.csi.scality.com/socket/" && p != m.kubeletPath+"/plugins_registry/" {
				t.Errorf("sidecar %s mounts host path %s", c.Name, p)
			}
		}
		if got, ok := flagValue(c.Args, "kubelet-registration-path"); ok && got != m.kubeletPath+"/plugins/s3.csi.scality.com/socket/csi.sock" {
			t.Errorf("registration path %q", got)
		}
	}
	if sidecars != 2 {
		t.Errorf("%d sidecars, want 2", sidecars)
	}
}
