package helm

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestNotesSayTheReconcilerMoved: the chart's notes tell an upgrade from a release whose Pod
// Reconciler was a container of s3-csi-controller that it now has a Deployment of its own, and
// say nothing of it otherwise (helm install --dry-run=server, so the chart's lookup sees the
// live Deployment of the test API server).
func TestNotesSayTheReconcilerMoved(t *testing.T) {
	k := apiServer(t)
	kubeconfig := k.Kubeconfig(t, "helm-notes-move", "system:masters")
	ctx := context.Background()
	const ns = "reconciler-move"
	if err := k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	notes := func(values string) string {
		t.Helper()
		out, err := harness.Helm(t, "install", release, harness.ChartDir(), "--namespace", ns, "--dry-run=server", "--kubeconfig", kubeconfig,
			"--values", values, "--set", "crd.install=false", "--set", "mountpointPod.createNamespace=false")
		if err != nil {
			t.Fatal(err)
		}
		_, n, _ := strings.Cut(out, "NOTES:")
		return n
	}
	const moved = "the Pod Reconciler moves from Deployment s3-csi-controller"
	if n := notes(modes[1].valuesFile()); strings.Contains(n, moved) {
		t.Errorf("a new install is told the Pod Reconciler moved:\n%s", n)
	}
	labels := map[string]string{"app": "s3-csi-controller"}
	container := func(name string) corev1.Container { return corev1.Container{Name: name, Image: "driver"} }
	dep := &appsv1.Deployment{
		// Owned by the release, as the earlier release's Deployment is.
		ObjectMeta: metav1.ObjectMeta{Name: "s3-csi-controller", Namespace: ns,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{container("s3-csi-controller"), container("csi-provisioner"), container("s3-pod-reconciler")},
			}},
		},
	}
	if err := k.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(ctx, dep) })
	if n := notes(modes[1].valuesFile()); !strings.Contains(n, moved) || !strings.Contains(n, "logs deploy/s3-pod-reconciler") {
		t.Errorf("an upgrade from a release with the Pod Reconciler in s3-csi-controller is not told it moved:\n%s", n)
	}
	if n := notes(modes[0].valuesFile()); strings.Contains(n, moved) {
		t.Errorf("without pod mode (no Pod Reconciler) the notes speak of it:\n%s", n)
	}
}
