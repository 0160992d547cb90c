package helm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/tests/harness"
	"github.com/s3csi/s3-csi-driver/tests/scality"
)

// The Scality release every test below upgrades, as a user has it: release name, namespace,
// the S3 endpoint and the credentials Secret of their values.
const (
	scalityRelease  = "scality-s3-csi"
	scalityNS       = "kube-system"
	scalityEndpoint = "https://s3.ring.example.com"
	scalitySecret   = "ring-credentials"
	caConfigMap     = "ring-ca"
	testCA          = "-----BEGIN CERTIFICATE-----\nMIIBiDCCAS+gAwIBAgIUG5yLMSDMTnsb6uCVnz4v7rx6Lh0wCgYIKoZIzj0EAwIw\nGjEYMBYGA1UEAwwPRXhhbXBsZSBSSU5HIENBMB4XDTI2MTEyMTAxMDY1NVoXDTM2\nMTExODAxMDY1NVowGjEYMBYGA1UEAwwPRXhhbXBsZSBSSU5HIENBMFkwEwYHKoZI\nzj0CAQYIKoZIzj0DAQcDQgAEmT2HQ6H4MCx3p+fXMlcBGbl4SkXCnADvbJo7Afi9\nHFEOWOFQtwW9QQUolk4BxXtWx7ep54PSHVCtBfXx2t4jQ6NTMFEwHQYDVR0OBBYE\nFNRARVMOeoeXQelAIKcAMCCvgjlBMB8GA1UdIwQYMBaAFNRARVMOeoeXQelAIKcA\nMCCvgjlBMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgIsCuESwx\nmOfWjoShAZ7x8rrSvwP0lzC0tXK95m97uhsCIClT7X3a44PXDO3f2RKxqkb64IdX\nPK/VXTX7M0J56f+H\n-----END CERTIFICATE-----" // values-mixed.yaml's: the chart refuses what is not a certificate
)

// scalityRig is one API server holding one Scality release, with what a live node of it has
// in the API: for 2.x a Mountpoint Pod serving a workload, its attachment, and 2.2.0's CA
// ConfigMaps.
type scalityRig struct {
	t          *testing.T
	k          *harness.Kube
	a          *applier
	kubeconfig string
	r          scality.Release
	chart      string
	mp         string // the 2.x Mountpoint Pod ("" for 1.x)
}

func newScalityRig(t *testing.T, r scality.Release, values map[string]any) *scalityRig {
	t.Helper()
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	s := &scalityRig{t: t, k: k, a: newApplier(t, k), r: r, kubeconfig: k.Kubeconfig(t, "helm-"+strings.ReplaceAll(string(r), ".", "-"), "system:masters")}
	chart, err := scality.Chart(t.TempDir(), r)
	harness.Must(t, err)
	s.chart = chart
	harness.Must(t, k.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}))
	if out, err := s.helm("install", scalityRelease, chart, "-n", scalityNS, "-f", s.valuesFile(values)); err != nil {
		t.Fatalf("install Scality's %s: %v\n%s", r, err, out)
	}
	if r.PodMode() {
		s.mp = s.create2xMount()
	}
	return s
}

func (s *scalityRig) helm(args ...string) (string, error) {
	s.t.Helper()
	return harness.Helm(s.t, append(args, "--kubeconfig", s.kubeconfig)...)
}

func (s *scalityRig) valuesFile(v map[string]any) string {
	s.t.Helper()
	b, err := yaml.Marshal(v)
	harness.Must(s.t, err)
	f := filepath.Join(s.t.TempDir(), "values.yaml")
	harness.Must(s.t, os.WriteFile(f, b, 0o600))
	return f
}

// create2xMount makes what Scality's 2.x controller makes for a workload on node-a: its
// Mountpoint Pod, with 2.x's four labels and no app.kubernetes.io/component, and the
// attachment naming the workload (scality.SOURCES.md §2.x Mountpoint Pod, attachment).
func (s *scalityRig) create2xMount() string {
	s.t.Helper()
	ctx := context.Background()
	mp := "mp-" + strings.Repeat("a", 56)
	m := scality.MountpointPod{Name: mp, Node: "node-a", WorkloadUID: "workload-uid", PV: "pv-a",
		Image: scality.Image + ":" + string(s.r), Command: "/bin/scality-s3-csi-mounter"}
	if s.r.TLS() {
		m.CAConfigMap, m.InitImage, m.InitCommand = caConfigMap, "ghcr.io/scality/mountpoint-s3-csi-driver/alpine:3.21", []string{"sh", "-c", "true"}
	}
	pod := m.Pod(s.r)
	pod.Spec.NodeName = "node-a" // as the scheduler would bind it
	harness.Must(s.t, s.k.Client.Create(ctx, pod))
	harness.Must(s.t, s.k.Client.Create(ctx, scality.Attachment(s.r, "node-a", "pv-a", "bucket-a", nil, "", mp, scality.Workload{UID: "workload-uid", Time: time.Now()})))
	return mp
}

// versions records the resourceVersion of every object of the release's current manifest.
func (s *scalityRig) versions() map[string]string {
	s.t.Helper()
	out, err := s.helm("get", "manifest", scalityRelease, "-n", scalityNS)
	harness.Must(s.t, err)
	objs, err := harness.DecodeManifests(out)
	harness.Must(s.t, err)
	got := map[string]string{}
	for _, o := range objs {
		cur, err := s.get(o)
		key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		if err != nil {
			got[key] = err.Error()
			continue
		}
		got[key] = cur.GetResourceVersion()
	}
	return got
}

func (s *scalityRig) get(o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(o.GroupVersionKind())
	return cur, s.k.Client.Get(context.Background(), client.ObjectKeyFromObject(o), cur)
}

func (s *scalityRig) revisions() int {
	s.t.Helper()
	out, err := s.helm("history", scalityRelease, "-n", scalityNS, "-o", "json")
	harness.Must(s.t, err)
	var h []map[string]any
	harness.Must(s.t, yaml.Unmarshal([]byte(out), &h))
	return len(h)
}

// ourValues are the user's values translated as docs/upgrade.md says: the endpoint, the
// region and the credentials Secret; 2.2.0's CA as tls.caBundle with its ConfigMap's name;
// headroom turned on over 2.x. No mode: the chart keeps what the release ran.
func ourValues(r scality.Release) map[string]any {
	v := map[string]any{"s3": map[string]any{"endpointUrl": scalityEndpoint, "region": "ring-1", "credentials": map[string]any{"secretName": scalitySecret}}}
	if r.PodMode() {
		v["mountpointPod"] = map[string]any{"headroom": map[string]any{"enabled": true}}
	}
	if r.TLS() {
		v["tls"] = map[string]any{"caBundle": testCA, "configMapName": caConfigMap}
	}
	return v
}

// theirValues are the typical user's values of the release, with 2.2.0's Helm-managed CA.
func theirValues(r scality.Release) map[string]any {
	v := scality.UserValues(r, scalityEndpoint, "ring-1", scalitySecret)
	if r.TLS() {
		v = scality.Merge(v, map[string]any{"tls": map[string]any{"caCertConfigMap": caConfigMap, "caCertData": testCA}})
	}
	return v
}

// upgradeArgs is docs/upgrade.md's command for the release: --take-ownership over 2.x (its CRD
// came from crds/, which Helm never owns).
func upgradeArgs(r scality.Release, extra ...string) []string {
	args := []string{"upgrade", scalityRelease, harness.ChartDir(), "-n", scalityNS}
	if r.PodMode() {
		args = append(args, "--take-ownership")
	}
	return append(args, extra...)
}

// TestUpgradeFromScality runs, on a real API server (v1.33) for each of Scality's seven
// releases (a release of tests/scality's reproduction of its chart with a typical user's
// values, and for 2.x a Mountpoint Pod in mount-s3 with its attachment), every path users take
// to this chart, in the order a user who tries them would:
//
//   - helm upgrade --reuse-values, and --reset-then-reuse-values: refused at render, naming the
//     command to use, before any object changes (no new revision, every object of the release
//     unchanged);
//   - helm upgrade -f values.yaml (with --take-ownership over 2.x), the values translated as
//     docs/upgrade.md says and no mode set: the selectors kept, the mode the release ran kept
//     (pod over 2.x), nothing deleted that serves a live mount (the mount-s3 Namespace, the 2.x
//     Mountpoint Pod, 2.2.0's CA ConfigMap there), headroom on in the same upgrade, the
//     disruption budget covering the 2.x Mountpoint Pod, Secrets of any namespace still
//     readable where Scality allowed it;
//   - helm rollback to the release: its objects back, nothing of the live mount lost;
//   - GitOps over the rolled-back release: the chart rendered without a cluster (refused
//     without the values only a cluster tells, and then equal to what helm upgrade renders),
//     applied server-side after docs/upgrade.md's two steps, with the same outcome as helm.
func TestUpgradeFromScality(t *testing.T) {
	for _, r := range scality.Releases {
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			s := newScalityRig(t, r, theirValues(r))
			s.reuseValuesRefused()
			s.upgrade()
			s.rollback()
			s.gitOps()
		})
	}
}

func (s *scalityRig) reuseValuesRefused() {
	t := s.t
	before, revs := s.versions(), s.revisions()
	_, err := s.helm(upgradeArgs(s.r, "--reuse-values")...)
	if err == nil || !strings.Contains(err.Error(), "helm upgrade --reuse-values replaces a chart's defaults") ||
		!strings.Contains(err.Error(), "these values are those of Scality's chart") || !strings.Contains(err.Error(), "Run helm upgrade "+scalityRelease) {
		t.Errorf("helm upgrade --reuse-values over %s: %v; want the refusal naming the command to use", s.r, err)
	}
	// Helm 3.14's --reset-then-reuse-values takes this chart's defaults and the user's
	// Scality values: those are refused one by one, with what to set instead.
	_, err = s.helm(upgradeArgs(s.r, "--reset-then-reuse-values")...)
	want := "s3CredentialSecret is a value of Scality's 1.x and 2.x chart: use s3.credentials.secretName"
	if s.r.TLS() { // 2.2.0's CA pair is refused first
		want = "tls.caCertConfigMap with tls.caCertData are values of Scality's 2.2.0 chart"
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("helm upgrade --reset-then-reuse-values over %s: %v; want the refusal %q", s.r, err, want)
	}
	if after := s.versions(); !maps.Equal(before, after) || s.revisions() != revs {
		t.Errorf("a refused upgrade changed the release: revisions %d -> %d, objects %v -> %v", revs, s.revisions(), before, after)
	}
}

func (s *scalityRig) upgrade() {
	if out, err := s.helm(upgradeArgs(s.r, "-f", s.valuesFile(ourValues(s.r)))...); err != nil {
		s.t.Fatalf("helm upgrade -f values.yaml over %s: %v\n%s", s.r, err, out)
	}
	s.expectOurs("after helm upgrade")
}

// expectOurs checks the release is this chart's and keeps what serves live mounts.
func (s *scalityRig) expectOurs(when string) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	c := s.k.Client
	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	harness.Must(t, c.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-node"}, &ds))
	harness.Must(t, c.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-controller"}, &dep))
	for what, got := range map[string]*metav1.LabelSelector{"node DaemonSet": ds.Spec.Selector, "controller Deployment": dep.Spec.Selector} {
		app := map[string]string{"node DaemonSet": "s3-csi-node", "controller Deployment": "s3-csi-controller"}[what]
		want := map[string]string{"app": app, "app.kubernetes.io/name": scality.ChartName, "app.kubernetes.io/instance": scalityRelease}
		if !maps.Equal(got.MatchLabels, want) {
			t.Errorf("%s: %s selector %v, want Scality's %v", when, what, got.MatchLabels, want)
		}
	}
	plugin := container(t, ds.Spec.Template.Spec, "s3-plugin")
	wantMode := map[bool]string{false: "systemd", true: "pod"}[s.r.PodMode()]
	if got, _ := flagValue(plugin.Args, "default-mounter"); got != wantMode {
		t.Errorf("%s: --default-mounter=%s, want %s (what %s ran, with no mode in the values)", when, got, wantMode, s.r)
	}
	if got := ds.Spec.Template.Annotations["s3.csi.scality.com/modes-in-use"]; got != wantMode {
		t.Errorf("%s: modes in use %q, want %s", when, got, wantMode)
	}
	if got, _ := flagValue(plugin.Args, "node-publish-secret-scope"); got != "any" {
		t.Errorf("%s: --node-publish-secret-scope=%s, want any (Scality's volumes may name a Secret of any namespace)", when, got)
	}
	for _, e := range plugin.Env {
		if e.Name == "AWS_ACCESS_KEY_ID" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != scalitySecret) {
			t.Errorf("%s: the node plugin's credentials come from %+v, want %s", when, e.ValueFrom, scalitySecret)
		}
	}
	var sa corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: ds.Spec.Template.Spec.ServiceAccountName}, &sa); err != nil {
		t.Errorf("%s: the node plugin's service account %s: %v", when, ds.Spec.Template.Spec.ServiceAccountName, err)
	}
	var cr rbacv1.ClusterRole
	harness.Must(t, c.Get(ctx, client.ObjectKey{Name: "scality-s3-csi-provisioner"}, &cr))
	if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "secrets") }) {
		t.Errorf("%s: the provisioner lost the Secrets every namespace had under %s", when, s.r)
	}
	var drv storagev1.CSIDriver
	harness.Must(t, c.Get(ctx, client.ObjectKey{Name: "s3.csi.scality.com"}, &drv))
	if p := drv.Spec.FSGroupPolicy; p == nil || *p != storagev1.NoneFSGroupPolicy {
		t.Errorf("%s: CSIDriver fsGroupPolicy %v, want this chart's None", when, p)
	}
	// The Mountpoint Pods' namespace is this chart's whatever the modes, never deleted.
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: scality.MountpointNamespace}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("%s: namespace %s: %v (deleting: %v)", when, scality.MountpointNamespace, err, ns.DeletionTimestamp)
	}
	if !s.r.PodMode() {
		return
	}
	var mp corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: scality.MountpointNamespace, Name: s.mp}, &mp); err != nil || mp.DeletionTimestamp != nil {
		t.Fatalf("%s: the 2.x Mountpoint Pod: %v (deleting: %v)", when, err, mp.DeletionTimestamp)
	}
	var pdb policyv1.PodDisruptionBudget
	harness.Must(t, c.Get(ctx, client.ObjectKey{Namespace: scality.MountpointNamespace, Name: "mountpoint-pods"}, &pdb))
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(mp.Labels)) {
		t.Errorf("%s: the disruption budget %v does not cover the 2.x Mountpoint Pod (labels %v)", when, pdb.Spec.Selector, mp.Labels)
	}
	var hc schedulingv1.PriorityClass
	if err := c.Get(ctx, client.ObjectKey{Name: "mount-s3-headroom"}, &hc); err != nil || hc.Value != -10 {
		t.Errorf("%s: headroom priority class %v %d, want 2.x's -10 kept", when, err, hc.Value)
	}
	var attachments unstructured.UnstructuredList
	attachments.SetGroupVersionKind(schema.GroupVersionKind{Group: "s3.csi.scality.com", Version: "v2", Kind: "MountpointS3PodAttachmentList"})
	harness.Must(t, c.List(ctx, &attachments))
	if len(attachments.Items) != 1 {
		t.Errorf("%s: %d attachments, want 2.x's one", when, len(attachments.Items))
	}
	if s.r.TLS() {
		for _, n := range []string{scalityNS, scality.MountpointNamespace} {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: n, Name: caConfigMap}, &cm); err != nil || strings.TrimSpace(cm.Data["ca-bundle.crt"]) != testCA {
				t.Errorf("%s: CA ConfigMap %s/%s: %v %q; 2.2.0's Mountpoint Pods read it when they start again", when, n, caConfigMap, err, cm.Data)
			}
		}
	}
}

func (s *scalityRig) rollback() {
	t := s.t
	if out, err := s.helm("rollback", scalityRelease, "1", "-n", scalityNS); err != nil {
		t.Fatalf("helm rollback to %s: %v\n%s", s.r, err, out)
	}
	ctx := context.Background()
	var ds appsv1.DaemonSet
	harness.Must(t, s.k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-node"}, &ds))
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != scality.Image+":"+string(s.r) || ds.Spec.Template.Spec.ServiceAccountName != scality.NodeServiceAccount {
		t.Errorf("after the rollback the node plugin is %s as %s, want %s's", img, ds.Spec.Template.Spec.ServiceAccountName, s.r)
	}
	harness.Must(t, s.k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: scality.NodeServiceAccount}, &corev1.ServiceAccount{}))
	// What differs between the releases is back as that release had it: systemd's socket file
	// or directory (1.x), the controller Deployment (1.2.0 on), 2.2.0's startup toleration.
	spec := ds.Spec.Template.Spec
	socket := ""
	for _, v := range spec.Volumes {
		if v.Name == "systemd-bus" && v.HostPath != nil && v.HostPath.Type != nil {
			socket = v.HostPath.Path + " " + string(*v.HostPath.Type)
		}
	}
	wantSocket := map[bool]string{true: "/run/systemd/private Socket", false: "/run/systemd Directory"}[s.r.SocketFileMounted()]
	if s.r.PodMode() {
		wantSocket = ""
	}
	if socket != wantSocket {
		t.Errorf("after the rollback systemd's socket volume is %q, want %s's %q", socket, s.r, wantSocket)
	}
	err := s.k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-controller"}, &appsv1.Deployment{})
	if (err == nil) != s.r.Controller() {
		t.Errorf("after the rollback the controller Deployment: %v, want it there: %v", err, s.r.Controller())
	}
	tolerated := slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "s3.csi.scality.com/agent-not-ready" })
	if tolerated != s.r.StartupTaint() {
		t.Errorf("after the rollback the startup taint is tolerated: %v, want %v", tolerated, s.r.StartupTaint())
	}
	var ns corev1.Namespace
	if err := s.k.Client.Get(ctx, client.ObjectKey{Name: scality.MountpointNamespace}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("after the rollback: namespace %s: %v (deleting: %v)", scality.MountpointNamespace, err, ns.DeletionTimestamp)
	}
	if s.r.PodMode() {
		var mp corev1.Pod
		if err := s.k.Client.Get(ctx, client.ObjectKey{Namespace: scality.MountpointNamespace, Name: s.mp}, &mp); err != nil || mp.DeletionTimestamp != nil {
			t.Errorf("after the rollback: the 2.x Mountpoint Pod: %v", err)
		}
		// The CRD stays (this chart keeps it), with the attachment.
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		harness.Must(t, s.k.Client.Get(ctx, client.ObjectKey{Name: "mountpoints3podattachments.s3.csi.scality.com"}, crd))
	}
}

// gitOps takes the rolled-back Scality release over as a GitOps tool would, with
// docs/upgrade.md's steps: render offline, delete the node DaemonSet and the controller
// Deployment with --cascade=orphan (their pods keep running; a server-side apply over objects
// another field manager made would keep that manager's containers), apply server-side, and
// delete Helm's record of the release (so that a later helm uninstall of it deletes nothing).
func (s *scalityRig) gitOps() {
	t := s.t
	ctx := context.Background()
	values := s.valuesFile(ourValues(s.r))
	offline := func(extra ...string) (string, error) {
		return harness.Helm(t, append([]string{"template", scalityRelease, harness.ChartDir(), "-n", scalityNS, "--kube-version", "1.33.0", "-f", values}, extra...)...)
	}
	_, err := offline()
	for _, v := range []string{"mounter.defaultMode", "node.publishSecretScope", "controller.provisioner.secretNamespaces"} {
		if err == nil || !strings.Contains(err.Error(), "set "+v) && !strings.Contains(err.Error(), "; "+v) {
			t.Errorf("offline render without the values only a cluster tells: %v; want a refusal naming %s", err, v)
		}
	}
	mode := map[bool]string{false: "systemd", true: "pod"}[s.r.PodMode()]
	rendered, err := offline("--set", "mounter.defaultMode="+mode, "--set", "node.publishSecretScope=any", "--set", "controller.provisioner.secretNamespaces={*}")
	if err != nil {
		t.Fatalf("offline render: %v", err)
	}
	// The same objects as helm upgrade renders from the cluster (helm install/upgrade's
	// dry run against the API server), so a GitOps tool and helm never disagree.
	online, err := s.helm(upgradeArgs(s.r, "-f", values, "--dry-run=server", "-o", "json")...)
	if err != nil {
		t.Fatalf("helm upgrade --dry-run=server: %v", err)
	}
	manifest, _ := dryRunOutput(t, online)
	if diff := diffManifests(t, manifest, rendered); diff != "" {
		t.Errorf("the offline render differs from helm upgrade's:\n%s", diff)
	}
	objs, err := harness.DecodeManifests(rendered)
	harness.Must(t, err)

	// docs/upgrade.md#gitops: the two workload controllers, orphaning their pods.
	orphan := metav1.DeletePropagationOrphan
	for _, o := range []client.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: scalityNS, Name: "s3-csi-node"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: scalityNS, Name: "s3-csi-controller"}},
	} {
		if err := s.k.Client.Delete(ctx, o, &client.DeleteOptions{PropagationPolicy: &orphan}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		s.waitGone(o)
	}
	for _, o := range objs {
		if err := s.a.apply(o, false); err != nil {
			t.Errorf("kubectl apply --server-side %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	var secrets corev1.SecretList
	harness.Must(t, s.k.Client.List(ctx, &secrets, client.InNamespace(scalityNS), client.MatchingLabels{"owner": "helm", "name": scalityRelease}))
	for i := range secrets.Items {
		harness.Must(t, s.k.Client.Delete(ctx, &secrets.Items[i]))
	}
	s.expectOurs("after the GitOps apply")
	var ds appsv1.DaemonSet
	harness.Must(t, s.k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-node"}, &ds))
	var names []string
	for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
		names = append(names, c.Name)
	}
	want := []string{"s3-plugin"}
	if !s.r.PodMode() {
		want = []string{"install-mp", "s3-plugin"}
	}
	if !slices.Equal(names, want) {
		t.Errorf("after the GitOps apply the node plugin runs %v, want this chart's %v alone", names, want)
	}
	if _, err := s.helm("status", scalityRelease, "-n", scalityNS); err == nil {
		t.Errorf("Helm still has a record of %s after the GitOps take-over", scalityRelease)
	}
}

// waitGone waits until the API server has removed o. Without kube-controller-manager no
// garbage collector removes the orphan finalizer: the test does, as it would.
func (s *scalityRig) waitGone(o client.Object) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.k.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return
		}
		harness.Must(s.t, err)
		if slices.Contains(o.GetFinalizers(), metav1.FinalizerOrphanDependents) {
			o.SetFinalizers(slices.DeleteFunc(o.GetFinalizers(), func(f string) bool { return f == metav1.FinalizerOrphanDependents }))
			if err := s.k.Client.Update(ctx, o); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				s.t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s still there", o.GetName())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dryRunOutput is the manifest and the notes of `helm install|upgrade --dry-run=server -o json`.
func dryRunOutput(t *testing.T, out string) (manifest, notes string) {
	t.Helper()
	var dry struct {
		Manifest string `json:"manifest"`
		Info     struct {
			Notes string `json:"notes"`
		} `json:"info"`
	}
	harness.Must(t, yaml.Unmarshal([]byte(out), &dry))
	return dry.Manifest, dry.Info.Notes
}

// diffManifests compares two renderings object by object, ignoring the order of objects.
func diffManifests(t *testing.T, a, b string) string {
	t.Helper()
	index := func(m string) map[string]string {
		objs, err := harness.DecodeManifests(m)
		harness.Must(t, err)
		out := map[string]string{}
		for _, o := range objs {
			y, err := yaml.Marshal(o.Object)
			harness.Must(t, err)
			out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = string(y)
		}
		return out
	}
	ia, ib := index(a), index(b)
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(ia)) {
		if ib[k] != ia[k] {
			diffs = append(diffs, fmt.Sprintf("%s:\n--- helm upgrade\n%s\n+++ offline\n%s", k, ia[k], ib[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ib)) {
		if _, ok := ia[k]; !ok {
			diffs = append(diffs, k+": only offline")
		}
	}
	return strings.Join(diffs, "\n")
}

// TestScalityServiceAccountsKept: a user of Scality's chart who made the accounts themselves
// (node.serviceAccount.create and controller.serviceAccount.create false, under the chart's
// default names) and carries create: false gets pods that run as those accounts; with the
// chart creating them, pods run as this chart's.
func TestScalityServiceAccountsKept(t *testing.T) {
	const r = scality.R120
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	ctx := context.Background()
	for _, n := range []string{scality.NodeServiceAccount, scality.CtrlServiceAccount} {
		harness.Must(t, k.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: scalityNS, Name: n}}))
	}
	s := &scalityRig{t: t, k: k, a: newApplier(t, k), r: r, kubeconfig: k.Kubeconfig(t, "helm-sa", "system:masters")}
	chart, err := scality.Chart(t.TempDir(), r)
	harness.Must(t, err)
	noCreate := map[string]any{"serviceAccount": map[string]any{"create": false}}
	theirs := scality.Merge(theirValues(r), map[string]any{"node": noCreate, "controller": noCreate})
	if out, err := s.helm("install", scalityRelease, chart, "-n", scalityNS, "-f", s.valuesFile(theirs)); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	ours := scality.Merge(ourValues(r), map[string]any{"node": noCreate, "controller": noCreate})
	if out, err := s.helm(upgradeArgs(r, "-f", s.valuesFile(ours))...); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, out)
	}
	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-node"}, &ds))
	harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: "s3-csi-controller"}, &dep))
	if ds.Spec.Template.Spec.ServiceAccountName != scality.NodeServiceAccount || dep.Spec.Template.Spec.ServiceAccountName != scality.CtrlServiceAccount {
		t.Errorf("with create: false the pods run as %s and %s, want the accounts the user made (%s, %s)",
			ds.Spec.Template.Spec.ServiceAccountName, dep.Spec.Template.Spec.ServiceAccountName, scality.NodeServiceAccount, scality.CtrlServiceAccount)
	}
	for _, n := range []string{scality.NodeServiceAccount, scality.CtrlServiceAccount} {
		if err := k.Client.Get(ctx, client.ObjectKey{Namespace: scalityNS, Name: n}, &corev1.ServiceAccount{}); err != nil {
			t.Errorf("the user's account %s: %v", n, err)
		}
	}
	// The chart binds its RBAC to them.
	var crb rbacv1.ClusterRoleBinding
	harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Name: "scality-s3-csi-node"}, &crb))
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != scality.NodeServiceAccount {
		t.Errorf("node RBAC bound to %v", crb.Subjects)
	}
}

// TestScalityPodModeKept: over 2.x, values that leave pod mode out while Mountpoint Pods run
// are refused at render, naming what to set (the mounts need pod mode to be kept and
// retired); nothing changes.
func TestScalityPodModeKept(t *testing.T) {
	s := newScalityRig(t, scality.R211, theirValues(scality.R211))
	before := s.versions()
	vals := scality.Merge(ourValues(s.r), map[string]any{"mounter": map[string]any{"defaultMode": "systemd"}})
	_, err := s.helm(upgradeArgs(s.r, "-f", s.valuesFile(vals))...)
	if err == nil || !strings.Contains(err.Error(), "Mountpoint Pod mount-s3/"+s.mp+" serves mounts on node node-a but mounter.modesInUse is [systemd]: add pod") {
		t.Errorf("systemd only over 2.x's Mountpoint Pods: %v; want the refusal naming the pod and mounter.modesInUse", err)
	}
	if after := s.versions(); !maps.Equal(before, after) {
		t.Errorf("a refused upgrade changed objects: %v -> %v", before, after)
	}
}

// TestKubernetes130Refused: Scality's charts install on Kubernetes 1.30; this chart needs 1.31
// (the CRD's selectable fields), and says so before anything changes.
func TestKubernetes130Refused(t *testing.T) {
	_, err := harness.HelmTemplate(t, release, namespace, "--kube-version", "1.30.9")
	if err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion: >=1.31.0-0 which is incompatible with Kubernetes v1.30.9") {
		t.Errorf("Kubernetes 1.30: %v; want Helm's kubeVersion refusal", err)
	}
	if _, err := harness.HelmTemplate(t, release, namespace, "--kube-version", "1.31.0"); err != nil {
		t.Errorf("Kubernetes 1.31: %v", err)
	}
}
