package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const fieldManager = "helm-chart-test"

// applier applies rendered objects to the envtest API server with server-side apply, which
// validates them against the real schemas and refuses unknown or duplicate fields.
type applier struct {
	t   *testing.T
	dyn dynamic.Interface
	rm  meta.RESTMapper
}

func newApplier(t *testing.T, k *harness.Kube) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{t: t, dyn: dyn, rm: k.Client.RESTMapper()}
}

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := a.rm.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s: namespaced object rendered without a namespace", gvk.Kind, o.GetName())
		}
		return a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()), nil
	}
	if o.GetNamespace() != "" {
		return nil, fmt.Errorf("%s %s: cluster-scoped object rendered with namespace %s", gvk.Kind, o.GetName(), o.GetNamespace())
	}
	return a.dyn.Resource(mapping.Resource), nil
}

// apply server-side-applies o; dryRun asks the server to validate and admit it without storing.
func (a *applier) apply(o *unstructured.Unstructured, dryRun bool) error {
	r, err := a.resource(o)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = r.Apply(ctx, o.GetName(), o, opts)
	return err
}

func (a *applier) delete(o *unstructured.Unstructured) error {
	r, err := a.resource(o)
	if err != nil {
		return err
	}
	err = r.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ensureNamespaces creates (for real) every namespace the objects live in, so that namespaced
// objects can be dry-run applied; envtest has no namespace controller, so they stay.
func ensureNamespaces(t *testing.T, k *harness.Kube, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		ns := o.GetNamespace()
		if o.GetKind() == "Namespace" {
			ns = o.GetName()
		}
		if ns == "" {
			continue
		}
		err := k.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
}

// TestServerSideDryRun applies every object each mode renders to a real kube-apiserver with
// dryRun=All: schemas, defaulting, validation and admission (Pod Security included) run, nothing
// is stored. The chart's CRD must also be the one in crd/ that envtest installed.
func TestServerSideDryRun(t *testing.T) {
	k := apiServer(t)
	a := newApplier(t, k)
	canonical := readCRDs(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, objs := m.render(t)
			ensureNamespaces(t, k, objs)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
				if o.GetKind() == "CustomResourceDefinition" {
					want, ok := canonical[o.GetName()]
					if !ok {
						t.Errorf("the chart renders CRD %s, which is not in crd/", o.GetName())
					} else if diff := cmp.Diff(want.Object["spec"], o.Object["spec"]); diff != "" {
						t.Errorf("CRD %s differs from crd/ (run make chart-crd) (-crd/ +chart):\n%s", o.GetName(), diff)
					}
				}
				if err := a.apply(o, true); err != nil {
					t.Errorf("%s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			t.Logf("%d objects accepted: %v", len(objs), kinds)
			if len(find(objs, "CustomResourceDefinition", "")) != len(canonical) {
				t.Errorf("the chart renders %d CRDs, crd/ holds %d", len(find(objs, "CustomResourceDefinition", "")), len(canonical))
			}
		})
	}
}

// readCRDs returns the canonical CRDs of crd/ by name.
func readCRDs(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD in crd/: %v", err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := harness.DecodeManifests(string(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			out[o.GetName()] = o
		}
	}
	return out
}

// access is one question to the API server's authorizer about a service account.
type access struct {
	verb, group, resource, namespace string
}

func (a access) String() string {
	if a.group == "" {
		return fmt.Sprintf("%s %s in %q", a.verb, a.resource, a.namespace)
	}
	return fmt.Sprintf("%s %s.%s in %q", a.verb, a.resource, a.group, a.namespace)
}

// TestRBAC applies each mode's service accounts and RBAC for real and asks the API server's
// authorizer (SubjectAccessReview) what the node plugin and the controller may do: what their
// code needs, and nothing they must not have (least privilege, and no Mountpoint Pod rights
// without pod mode).
func TestRBAC(t *testing.T) {
	k := apiServer(t)
	a := newApplier(t, k)
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	isRBAC := func(kind string) bool {
		return slices.Contains([]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}, kind)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, objs := m.render(t)
			ensureNamespaces(t, k, objs)
			var applied []*unstructured.Unstructured
			t.Cleanup(func() {
				for _, o := range applied {
					if err := a.delete(o); err != nil {
						t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
					}
				}
			})
			for _, o := range objs {
				if isRBAC(o.GetKind()) {
					if err := a.apply(o, false); err != nil {
						t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
					}
					applied = append(applied, o)
				}
			}
			mp := m.mpNamespace
			s3pa := "mountpoints3podattachments"
			const group = "s3.csi.scality.com"
			nodeAllowed := []access{
				{"get", "", "nodes", ""}, {"watch", "", "nodes", ""}, {"patch", "", "nodes", ""},
				{"create", "", "events", "default"},
				{"list", "storage.k8s.io", "csinodes", ""}, {"watch", "storage.k8s.io", "csinodes", ""},
				{"list", group, s3pa, ""}, {"watch", group, s3pa, ""},
				{"get", "", "persistentvolumes", ""},
			}
			nodeDenied := []access{
				{"list", "", "persistentvolumes", ""},
				{"create", "", "pods", mp}, {"delete", "", "pods", mp}, {"list", "", "pods", "default"},
				{"get", "", "secrets", namespace}, {"delete", "", "nodes", ""}, {"create", group, s3pa, ""},
				{"update", "", "persistentvolumes", ""},
			}
			// restart-pod recovery: workload pods anywhere (RBAC cannot leave the Mountpoint Pods'
			// namespace out of a ClusterRole), and never pod creation.
			restart := []access{{"delete", "", "pods", "team-a"}, {"get", "", "pods", "team-a"}, {"get", "", "persistentvolumeclaims", "team-a"}}
			if m.restartPods {
				nodeAllowed = append(nodeAllowed, restart...)
				nodeDenied = slices.DeleteFunc(nodeDenied, func(a access) bool { return a == access{"delete", "", "pods", mp} })
			} else {
				nodeDenied = append(nodeDenied, restart...)
			}
			if m.pod {
				nodeAllowed = append(nodeAllowed, access{"list", "", "pods", mp}, access{"watch", "", "pods", mp})
			} else {
				nodeDenied = append(nodeDenied, access{"list", "", "pods", mp})
			}
			ctrlAllowed := []access{
				{"create", "", "persistentvolumes", ""}, {"delete", "", "persistentvolumes", ""},
				{"update", "", "persistentvolumeclaims", "team-a"}, {"list", "storage.k8s.io", "storageclasses", ""},
				{"create", "", "events", "team-a"},
				{"create", "coordination.k8s.io", "leases", namespace}, {"update", "coordination.k8s.io", "leases", namespace},
			}
			ctrlDenied := []access{
				{"create", "", "pods", "default"}, {"patch", "", "nodes", ""}, {"list", "", "secrets", "team-a"},
				{"update", "", "persistentvolumes", ""},
			}
			// Secrets: every namespace (mixed: ["*"]), team-a only (pod), none (systemd: the
			// default of a new install).
			switch {
			case m.secretNSAll:
				ctrlAllowed = append(ctrlAllowed, access{"get", "", "secrets", "default"}, access{"get", "", "secrets", "team-a"})
			case slices.Contains(m.secretNS, "team-a"):
				ctrlAllowed = append(ctrlAllowed, access{"get", "", "secrets", "team-a"})
				ctrlDenied = append(ctrlDenied, access{"get", "", "secrets", "default"})
			default:
				ctrlDenied = append(ctrlDenied, access{"get", "", "secrets", "default"}, access{"get", "", "secrets", "team-a"})
			}
			// The Pod Reconciler has a service account of its own (pod mode): Mountpoint Pods,
			// attachments, reading workloads; never Secrets, PersistentVolume writes or Nodes.
			// csi-provisioner's account never gets what the Pod Reconciler does.
			reconciler := []access{
				{"create", "", "pods", mp}, {"delete", "", "pods", mp}, {"list", "", "pods", ""},
				{"create", group, s3pa, ""}, {"update", group, s3pa, ""}, {"list", "", "persistentvolumes", ""},
			}
			reconcilerDenied := []access{
				{"get", "", "secrets", "default"}, {"get", "", "secrets", "team-a"}, {"get", "", "secrets", mp},
				{"create", "", "persistentvolumes", ""}, {"delete", "", "persistentvolumes", ""},
				{"update", "", "persistentvolumeclaims", "team-a"}, {"create", "", "pods", "default"},
				{"patch", "", "nodes", ""},
			}
			ctrlDenied = append(ctrlDenied, reconciler[0], reconciler[1], reconciler[3], reconciler[4])
			if !m.pod {
				// The provisioner's Lease is in the release namespace only.
				ctrlDenied = append(ctrlDenied, access{"create", "coordination.k8s.io", "leases", "default"})
			}
			check := func(sa string, want bool, list []access) {
				user := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa)
				for _, q := range list {
					sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User:   user,
						Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
						ResourceAttributes: &authorizationv1.ResourceAttributes{
							Verb: q.verb, Group: q.group, Resource: q.resource, Namespace: q.namespace,
						},
					}}
					got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
					if err != nil {
						t.Fatalf("SubjectAccessReview: %v", err)
					}
					if got.Status.Allowed != want {
						t.Errorf("%s may %s: %v, want %v", sa, q, got.Status.Allowed, want)
					}
				}
			}
			check("s3-csi-node", true, nodeAllowed)
			check("s3-csi-node", false, nodeDenied)
			check("s3-csi-controller", true, ctrlAllowed)
			check("s3-csi-controller", false, ctrlDenied)
			if m.pod {
				check("s3-pod-reconciler", true, reconciler)
				check("s3-pod-reconciler", false, reconcilerDenied)
			} else {
				check("s3-pod-reconciler", false, reconciler)
			}
		})
	}
}
