package helm

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestNodeModeGuard installs the chart with --dry-run=server against the envtest API server, so
// the chart can look at the Nodes: a node labelled (or running) in a mode that
// mounter.modesInUse leaves out must stop the install or upgrade with a message naming it.
func TestNodeModeGuard(t *testing.T) {
	k := apiServer(t)
	kubeconfig := k.Kubeconfig(t, "helm-admin", "system:masters")
	ctx := context.Background()
	if err := k.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "guard-worker-1"}}
	if err := k.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(ctx, node) })
	set := func(labels, annotations map[string]string) {
		t.Helper()
		if err := k.Client.Get(ctx, harnessKey(node.Name), node); err != nil {
			t.Fatal(err)
		}
		node.Labels, node.Annotations = labels, annotations
		if err := k.Client.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	install := func(values ...string) error {
		// Objects the other tests made exist already (envtest's CRD, namespaces): leave them out.
		args := []string{"install", release, harness.ChartDir(), "--namespace", namespace, "--dry-run=server", "--kubeconfig", kubeconfig,
			"--set", "crd.install=false", "--set", "mountpointPod.createNamespace=false"}
		for _, v := range values {
			args = append(args, "--values", v)
		}
		_, err := harness.Helm(t, args...)
		return err
	}
	systemdOnly, podOnly, mixed := modes[0].valuesFile(), modes[1].valuesFile(), modes[2].valuesFile()

	if err := install(systemdOnly); err != nil {
		t.Fatalf("no node uses a mode: %v", err)
	}
	set(map[string]string{"s3.csi.scality.com/mounter": "pod"}, nil)
	err := install(systemdOnly)
	if err == nil || !strings.Contains(err.Error(), "node guard-worker-1 is labelled s3.csi.scality.com/mounter=pod but mounter.modesInUse is [systemd]") {
		t.Errorf("a pod-labelled node with modesInUse [systemd]: %v", err)
	}
	if err := install(mixed); err != nil {
		t.Errorf("a pod-labelled node with both modes in use: %v", err)
	}
	set(map[string]string{"s3.csi.scality.com/mounter": "typo"}, nil)
	if err := install(systemdOnly); err != nil {
		t.Errorf("an invalid label (the node uses the default) must not block: %v", err)
	}
	set(nil, map[string]string{"s3.csi.scality.com/effective-mounter": "systemd"})
	err = install(podOnly)
	if err == nil || !strings.Contains(err.Error(), "node guard-worker-1 currently mounts in systemd mode") {
		t.Errorf("a node still in systemd mode with modesInUse [pod]: %v", err)
	}
}

func harnessKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
