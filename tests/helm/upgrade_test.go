package helm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/google/go-cmp/cmp"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// csiDriver1x is the CSIDriver object of the Scality driver 1.x chart, reproduced field by field
// from ../shared/reference/anchors.md §8.3 (charts/scality-mountpoint-s3-csi-driver,
// templates/csidriver.yaml): attachRequired false, podInfoOnMount true, requiresRepublish true,
// and neither fsGroupPolicy nor volumeLifecycleModes (the API server defaults them to
// ReadWriteOnceWithFSType and [Persistent]).
const csiDriver1x = `
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: s3.csi.scality.com
  labels:
    app.kubernetes.io/managed-by: Helm
  annotations:
    meta.helm.sh/release-name: scality-mountpoint-s3-csi-driver
    meta.helm.sh/release-namespace: kube-system
spec:
  attachRequired: false
  podInfoOnMount: true
  requiresRepublish: true
`

// TestCSIDriverFrom1x: on a real API server (v1.33), this chart's CSIDriver replaces the 1.x one
// in place, fsGroupPolicy included (mutable since Kubernetes 1.29), and the result is this
// chart's object field for field: `helm upgrade <1.x release> charts/scality-s3-csi-driver` needs
// no step for it (docs/upgrade.md). Running mounts do not depend on the CSIDriver object.
func TestCSIDriverFrom1x(t *testing.T) {
	k := apiServer(t)
	a := newApplier(t, k)
	var old unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(csiDriver1x), &old.Object); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(&old, false); err != nil {
		t.Fatalf("1.x CSIDriver: %v", err)
	}
	t.Cleanup(func() { _ = a.delete(&old) })
	var before storagev1.CSIDriver
	harness.Must(t, k.Client.Get(context.Background(), client.ObjectKey{Name: "s3.csi.scality.com"}, &before))
	if p := before.Spec.FSGroupPolicy; p == nil || *p != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy {
		t.Fatalf("the 1.x CSIDriver's fsGroupPolicy defaulted to %v, want ReadWriteOnceWithFSType: the fixture does not stand for 1.x", p)
	}
	_, objs := modes[0].render(t)
	ours := one(t, objs, "CSIDriver", "s3.csi.scality.com")
	if err := a.apply(ours, false); err != nil {
		t.Fatalf("applying this chart's CSIDriver over 1.x's: %v", err)
	}
	var after storagev1.CSIDriver
	harness.Must(t, k.Client.Get(context.Background(), client.ObjectKey{Name: "s3.csi.scality.com"}, &after))
	var want storagev1.CSIDriver
	harness.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(ours.Object, &want))
	if p := after.Spec.FSGroupPolicy; p == nil || *p != *want.Spec.FSGroupPolicy || after.Spec.RequiresRepublish == nil || !*after.Spec.RequiresRepublish || !*after.Spec.PodInfoOnMount ||
		fmt.Sprint(after.Spec.VolumeLifecycleModes) != fmt.Sprint(want.Spec.VolumeLifecycleModes) {
		t.Errorf("after the upgrade the CSIDriver is %+v, want this chart's %+v", after.Spec, want.Spec)
	}
}

// TestValuesOf1xRefused: values users set in the 1.x and 2.x charts that this chart does not
// take are refused with what to use instead (never the schema's bare "additional properties").
func TestValuesOf1xRefused(t *testing.T) {
	for set, want := range map[string]string{
		"s3CredentialSecret.name=s3-secret":                         "use s3.credentials.secretName",
		"node.s3EndpointUrl=http://s3.example.com":                  "use s3.endpointUrl",
		"node.s3Region=us-east-1":                                   "use s3.region",
		"node.mountpointInstallPath=/opt/x/":                        "use node.mountS3InstallDir",
		"node.defaultTolerations=true":                              "use node.tolerations",
		"node.podInfoOnMountCompat.enable=true":                     "podInfoOnMount",
		"tls.caCertConfigMap=ca":                                    "use tls.existingConfigMap",
		"tls.caCertData=x":                                          "use tls.caBundle",
		"initContainer.installMountpoint.resources.requests.cpu=1m": "node.resources",
		"experimental.podMounter=true":                              "mounter.modesInUse",
		"nameOverride=s3":                                           "selectors of its live DaemonSet and Deployment",
		"fullnameOverride=s3":                                       "selectors of its live DaemonSet and Deployment",
		"controller.enable=true":                                    "the controller Deployment is always installed",
		"node.volumes[0].name=extra":                                "host paths its mode needs",
		"sidecars.nodeDriverRegistrar.env[0].name=A":                "sidecars.nodeDriverRegistrar.env",
		"sidecars.livenessProbe.volumeMounts[0].name=a":             "sidecars.livenessProbe.volumeMounts",
		"sidecars.csiProvisioner.env[0].name=A":                     "sidecars.csiProvisioner.env",
		"mountpointPod.preemptingPriorityClassName=x":               "mountpointPod.priorityClassName",
		"mountpointPod.headroomPriorityClassName=x":                 "mountpointPod.headroom.priorityClassName",
		"mountpointPod.headroomImage.tag=3.10":                      "run the driver image",
		"image.containerRegistry=ghcr.io":                           "image.repository",
		"controller.seLinuxOptions.type=x":                          "no SELinux type",
	} {
		_, err := harness.HelmTemplate(t, release, namespace, "--set", set)
		if err == nil || !strings.Contains(err.Error(), "chart: ") || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "is a value of the 1.x") && !strings.Contains(err.Error(), "is a value of the 2.x") {
			t.Errorf("--set %s: %v; want a refusal naming %q", set, err, want)
		}
	}
	// 2.x's pair (create that ConfigMap from that data) is one value here, not the two the
	// single refusals name (which this chart refuses together).
	if _, err := harness.HelmTemplate(t, release, namespace, "--set", "tls.caCertConfigMap=ca", "--set", "tls.caCertData=x"); err == nil ||
		!strings.Contains(err.Error(), "use tls.caBundle alone") {
		t.Errorf("tls.caCertConfigMap with tls.caCertData: %v; want one refusal naming tls.caBundle alone", err)
	}
	// Mapped, not refused: 1.x's serviceAccount.create (false: the account exists already).
	out, err := harness.HelmTemplate(t, release, namespace, "--set", "node.serviceAccount.create=false", "--set", "controller.serviceAccount.create=true")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "kind: ServiceAccount\nmetadata:\n  name: s3-csi-node\n") || !strings.Contains(out, "kind: ServiceAccount\nmetadata:\n  name: s3-csi-controller\n") {
		t.Errorf("serviceAccount.create: the node's account rendered or the controller's missing:\n%s", out)
	}
}

// TestOneDefaultMode: the chart's mounter.defaultMode, the node plugin's and the controller's
// --default-mounter defaults are one value, mountmode.Default.
func TestOneDefaultMode(t *testing.T) {
	out, err := harness.Helm(t, "show", "values", harness.ChartDir())
	harness.Must(t, err)
	var v struct {
		Mounter struct {
			DefaultMode string `json:"defaultMode"`
		} `json:"mounter"`
	}
	harness.Must(t, yaml.Unmarshal([]byte(out), &v))
	if v.Mounter.DefaultMode != string(mountmode.Default) {
		t.Errorf("chart mounter.defaultMode = %q, code default %q", v.Mounter.DefaultMode, mountmode.Default)
	}
	for _, bin := range []string{"scality-s3-csi-driver", "scality-csi-controller"} {
		help, _ := exec.Command(harness.Bin(t, bin), "-h").CombinedOutput()
		want := fmt.Sprintf("(default %q)", string(mountmode.Default))
		i := strings.Index(string(help), "-default-mounter")
		if i < 0 || !strings.Contains(string(help[i:min(len(help), i+400)]), want) {
			t.Errorf("%s --default-mounter: want the default %s in its help", bin, want)
		}
	}
}

// TestHelmUpgradeFrom1xRelease runs `helm upgrade <1.x release> charts/scality-s3-csi-driver` on
// a real API server (v1.33) against a release of the 1.x chart's objects (testdata/chart-1x:
// CSIDriver, node DaemonSet, controller Deployment, ServiceAccounts and RBAC), as
// docs/upgrade.md says, then `helm rollback` to the 1.x revision. Whatever selectors the 1.x
// release has (its own three labels, with its chart name or a nameOverride, or app alone), the
// upgrade goes through in one step: the DaemonSet and the Deployment keep their immutable
// selectors (read from the live objects) and their pods carry them; the release then holds
// this chart's objects only (the 1.x ServiceAccounts and RBAC are gone, the CSIDriver is this
// chart's). The rollback goes through in one step too and brings 1.x's objects back.
func TestHelmUpgradeFrom1xRelease(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true}) // 1.x has no CRD
	kubeconfig := k.Kubeconfig(t, "helm-upgrade", "system:masters")
	const rel, ns = "scality-s3-csi-1x", "kube-system"
	helm := func(args ...string) (string, error) {
		return harness.Helm(t, append(args, "--kubeconfig", kubeconfig)...)
	}
	chart1x := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "chart-1x")
	values := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "values-systemd.yaml")
	for _, tc := range []struct {
		name string
		set  string // --set of the 1.x release
		want map[string]string
	}{
		{"1.x selectors", "",
			map[string]string{"app.kubernetes.io/name": "scality-mountpoint-s3-csi-driver", "app.kubernetes.io/instance": rel}},
		{"1.x selectors with a nameOverride", "nameOverride=s3-csi",
			map[string]string{"app.kubernetes.io/name": "s3-csi", "app.kubernetes.io/instance": rel}},
		{"app alone", "selectorLabels.app\\.kubernetes\\.io/name=null,selectorLabels.app\\.kubernetes\\.io/instance=null", map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			args := []string{"install", rel, chart1x, "-n", ns}
			if tc.set != "" {
				args = append(args, "--set", tc.set)
			}
			if out, err := helm(args...); err != nil {
				t.Fatalf("install the 1.x release: %v\n%s", err, out)
			}
			t.Cleanup(func() { _, _ = helm("uninstall", rel, "-n", ns, "--wait") })
			if out, err := helm("upgrade", rel, harness.ChartDir(), "-n", ns, "-f", values); err != nil {
				t.Fatalf("upgrade: %v\n%s", err, out)
			}
			var ds appsv1.DaemonSet
			var dep appsv1.Deployment
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-node"}, &ds))
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-controller"}, &dep))
			for _, o := range []struct {
				what     string
				selector *metav1.LabelSelector
				labels   map[string]string
				sa, app  string
			}{
				{"node DaemonSet", ds.Spec.Selector, ds.Spec.Template.Labels, ds.Spec.Template.Spec.ServiceAccountName, "s3-csi-node"},
				{"controller Deployment", dep.Spec.Selector, dep.Spec.Template.Labels, dep.Spec.Template.Spec.ServiceAccountName, "s3-csi-controller"},
			} {
				want := map[string]string{"app": o.app}
				maps.Copy(want, tc.want)
				if diff := cmp.Diff(want, o.selector.MatchLabels); diff != "" {
					t.Errorf("%s selector after the upgrade (-1.x's +got):\n%s", o.what, diff)
				}
				for k, v := range want {
					if o.labels[k] != v {
						t.Errorf("%s pod label %s = %q, want the selector's %q", o.what, k, o.labels[k], v)
					}
				}
				if o.sa != o.app {
					t.Errorf("%s service account %s after the upgrade, want this chart's %s", o.what, o.sa, o.app)
				}
			}
			for _, o := range []client.Object{
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "s3-csi-driver-sa", Namespace: ns}},
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "s3-csi-driver-controller-sa", Namespace: ns}},
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "s3-csi-driver-cluster-role"}},
				&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "s3-csi-driver-cluster-role-binding"}},
			} {
				if err := k.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
					t.Errorf("1.x %T %s outlived the upgrade (%v)", o, o.GetName(), err)
				}
			}
			var drv storagev1.CSIDriver
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Name: "s3.csi.scality.com"}, &drv))
			if p := drv.Spec.FSGroupPolicy; p == nil || *p != storagev1.NoneFSGroupPolicy {
				t.Errorf("CSIDriver fsGroupPolicy after the upgrade: %v, want this chart's None", p)
			}

			// docs/upgrade.md: helm rollback to the 1.x revision.
			if out, err := helm("rollback", rel, "1", "-n", ns); err != nil {
				t.Fatalf("rollback to 1.x: %v\n%s", err, out)
			}
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-node"}, &ds))
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-controller"}, &dep))
			if ds.Spec.Template.Spec.ServiceAccountName != "s3-csi-driver-sa" || dep.Spec.Template.Spec.ServiceAccountName != "s3-csi-driver-controller-sa" ||
				ds.Spec.Template.Spec.Containers[0].Image != "ghcr.io/scality/mountpoint-s3-csi-driver:1.2.0" {
				t.Errorf("after the rollback: DaemonSet %s %s, Deployment %s; want 1.x's", ds.Spec.Template.Spec.ServiceAccountName,
					ds.Spec.Template.Spec.Containers[0].Image, dep.Spec.Template.Spec.ServiceAccountName)
			}
			harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Name: "s3-csi-driver-sa", Namespace: ns}, &corev1.ServiceAccount{}))
		})
	}
}

// TestHelmUpgradeFrom1xKeepsItsCredentials: a 1.x user who never set s3CredentialSecret had
// the node plugin (and controller) take the driver's credentials from the Secret s3-secret.
// Upgraded with no s3.credentials.secretName, this chart keeps that Secret and its keys (read
// from the live node plugin), and keeps it on the next upgrade too; keepLive=false drops it,
// and a Secret that no longer exists is not carried over.
func TestHelmUpgradeFrom1xKeepsItsCredentials(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	kubeconfig := k.Kubeconfig(t, "helm-upgrade-creds", "system:masters")
	const rel, ns = "scality-s3-csi-1x", "kube-system"
	helm := func(args ...string) (string, error) {
		return harness.Helm(t, append(args, "--kubeconfig", kubeconfig)...)
	}
	ctx := context.Background()
	chart1x := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "chart-1x")
	values := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "values-systemd.yaml")
	// credentialSecrets returns the Secret each credential variable of the node plugin and the
	// CSI controller comes from ("" when none).
	credentialSecrets := func() map[string]string {
		var ds appsv1.DaemonSet
		var dep appsv1.Deployment
		harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-node"}, &ds))
		harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-csi-controller"}, &dep))
		got := map[string]string{}
		for who, c := range map[string]*corev1.Container{"node": container(t, ds.Spec.Template.Spec, "s3-plugin"), "controller": container(t, dep.Spec.Template.Spec, "s3-csi-controller")} {
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && strings.HasPrefix(e.Name, "AWS_") {
					got[who+" "+e.Name] = r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
				}
			}
		}
		return got
	}
	kept := map[string]string{
		"node AWS_ACCESS_KEY_ID": "s3-secret/access_key_id", "node AWS_SECRET_ACCESS_KEY": "s3-secret/secret_access_key", "node AWS_SESSION_TOKEN": "s3-secret/session_token",
		"controller AWS_ACCESS_KEY_ID": "s3-secret/access_key_id", "controller AWS_SECRET_ACCESS_KEY": "s3-secret/secret_access_key", "controller AWS_SESSION_TOKEN": "s3-secret/session_token",
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-secret", Namespace: ns},
		StringData: map[string]string{"access_key_id": "AKIA", "secret_access_key": "secret"}}
	harness.Must(t, k.Client.Create(ctx, secret))
	if out, err := helm("install", rel, chart1x, "-n", ns); err != nil {
		t.Fatalf("install the 1.x release: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = helm("uninstall", rel, "-n", ns, "--wait") })
	for i, step := range []struct {
		what string
		set  string
		want map[string]string
	}{
		{"upgrade from 1.x", "", kept},
		{"next upgrade", "", kept},
		{"keepLive=false", "s3.credentials.keepLive=false", map[string]string{}},
		{"set again", "s3.credentials.secretName=s3-secret", kept},
		{"Secret deleted", "", map[string]string{}},
	} {
		if step.what == "Secret deleted" {
			harness.Must(t, k.Client.Delete(ctx, secret))
			// The chart must not carry over a Secret that no longer exists: start from a release
			// whose node plugin still names it, as the previous step left it.
		}
		args := []string{"upgrade", rel, harness.ChartDir(), "-n", ns, "-f", values, "--set", "s3.credentials.secretName="}
		if step.set != "" {
			args = append(args, "--set", step.set)
		}
		if out, err := helm(args...); err != nil {
			t.Fatalf("step %d (%s): %v\n%s", i, step.what, err, out)
		}
		if diff := cmp.Diff(step.want, credentialSecrets()); diff != "" {
			t.Errorf("step %d (%s): credential variables (-want +got):\n%s", i, step.what, diff)
		}
	}
}

// TestHelmUpgradeFrom2xAdoptsTheCRD: the 2.x chart installs the MountpointS3PodAttachment CRD
// from crds/, which Helm never owns. This chart templates the CRD, so a plain helm upgrade of a
// 2.x release is refused (the CRD "cannot be imported into the current release"), and
// `helm upgrade --take-ownership` (docs/upgrade.md) adopts it in the same one command: the CRD
// is then the release's, with this chart's schema (authenticationSource, its selectable field),
// and stays through a rollback (helm.sh/resource-policy: keep).
func TestHelmUpgradeFrom2xAdoptsTheCRD(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	kubeconfig := k.Kubeconfig(t, "helm-upgrade-2x", "system:masters")
	const rel, ns = "scality-s3-csi-2x", "kube-system"
	helm := func(args ...string) (string, error) {
		return harness.Helm(t, append(args, "--kubeconfig", kubeconfig)...)
	}
	ctx := context.Background()
	// The 2.x chart: the 1.x fixture's objects, version 2.2.0, and the CRD in crds/.
	chart2x := filepath.Join(t.TempDir(), "chart-2x")
	harness.Must(t, os.CopyFS(chart2x, os.DirFS(filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "chart-1x"))))
	harness.Must(t, os.MkdirAll(filepath.Join(chart2x, "crds"), 0o755))
	crd, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "crd-2x", "mountpoints3podattachments.yaml"))
	harness.Must(t, err)
	harness.Must(t, os.WriteFile(filepath.Join(chart2x, "crds", "mountpoints3podattachments.yaml"), crd, 0o644))
	meta, err := os.ReadFile(filepath.Join(chart2x, "Chart.yaml"))
	harness.Must(t, err)
	harness.Must(t, os.WriteFile(filepath.Join(chart2x, "Chart.yaml"), []byte(strings.ReplaceAll(string(meta), "1.2.0", "2.2.0")), 0o644))
	if out, err := helm("install", rel, chart2x, "-n", ns); err != nil {
		t.Fatalf("install the 2.x release: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = helm("uninstall", rel, "-n", ns, "--wait") })
	values := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "values-systemd.yaml") // the CRD renders in every mode

	_, err = helm("upgrade", rel, harness.ChartDir(), "-n", ns, "-f", values)
	if err == nil || !strings.Contains(err.Error(), "cannot be imported into the current release") {
		t.Fatalf("plain upgrade over 2.x's CRD: %v; want Helm's refusal to import it (what --take-ownership is for)", err)
	}
	if out, err := helm("upgrade", rel, harness.ChartDir(), "-n", ns, "-f", values, "--take-ownership"); err != nil {
		t.Fatalf("upgrade --take-ownership: %v\n%s", err, out)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Name: "mountpoints3podattachments.s3.csi.scality.com"}, got))
	if got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" || got.GetAnnotations()["meta.helm.sh/release-name"] != rel {
		t.Errorf("CRD not adopted by the release: labels %v, annotations %v", got.GetLabels(), got.GetAnnotations())
	}
	versions, _, _ := unstructured.NestedSlice(got.Object, "spec", "versions")
	var fields map[string]any
	if len(versions) == 1 {
		fields, _, _ = unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
	}
	if _, ok := fields["authenticationSource"]; !ok {
		t.Errorf("CRD schema still 2.x's (no authenticationSource): %v", slices.Sorted(maps.Keys(fields)))
	}
	if out, err := helm("rollback", rel, "1", "-n", ns); err != nil {
		t.Fatalf("rollback to 2.x: %v\n%s", err, out)
	}
	harness.Must(t, k.Client.Get(ctx, client.ObjectKey{Name: "mountpoints3podattachments.s3.csi.scality.com"}, got))
}
