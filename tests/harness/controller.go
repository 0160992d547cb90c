package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControllerOptions configure a scality-csi-controller process.
type ControllerOptions struct {
	// User is the Kubernetes user it runs as (default "scality-csi-controller"), bound to the
	// generated least-privilege RBAC.
	User string
	// LeaderElect enables leader election (the default in production; off by default here so
	// tests can run several replicas at once).
	LeaderElect bool
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Controller is a running scality-csi-controller.
type Controller struct {
	*Process
	// MetricsURL is its Prometheus endpoint.
	MetricsURL string
}

// StartController runs bin/scality-csi-controller against k with the project's generated RBAC
// (charts/scality-s3-csi-driver/files/controller-rbac.yaml) bound to its user.
func StartController(t TB, k *Kube, o ControllerOptions) *Controller {
	t.Helper()
	if o.User == "" {
		o.User = "scality-csi-controller"
	}
	k.BindRBAC(t, "controller-rbac.yaml", o.User)
	port, err := FreePort()
	if err != nil {
		t.Fatalf("metrics port: %v", err)
	}
	args := []string{
		"--kubeconfig=" + k.Kubeconfig(t, o.User),
		"--mountpoint-image=registry.example/scality-s3-csi-driver:test",
		fmt.Sprintf("--metrics-address=127.0.0.1:%d", port),
		"--health-probe-address=0",
		fmt.Sprintf("--leader-elect=%t", o.LeaderElect),
		"--leader-election-namespace=default",
		"--default-mounter=pod",
		"--v=2",
	}
	c := &Controller{MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	c.Process = StartProcess(t, "scality-csi-controller", append(args, o.ExtraArgs...), []string{"PATH=/usr/bin:/bin"})
	return c
}

// BindRBAC creates the ClusterRole and Roles of a generated RBAC file of the chart
// (charts/scality-s3-csi-driver/files/<file>, idempotently) and binds them to user.
func (k *Kube) BindRBAC(t TB, file, user string) {
	t.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(), "charts", "scality-s3-csi-driver", "files", file))
	if err != nil {
		t.Fatalf("RBAC %s: %v", file, err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode RBAC: %v", err)
		}
		switch u.GetKind() {
		case "":
			continue
		case "ClusterRole":
			var role rbacv1.ClusterRole
			fromUnstructured(t, &u, &role)
			createOrKeep(t, k.Client, &role)
			createOrKeep(t, k.Client, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + user},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
		case "Role":
			var role rbacv1.Role
			fromUnstructured(t, &u, &role)
			ensureNamespace(t, k.Client, role.Namespace)
			createOrKeep(t, k.Client, &role)
			createOrKeep(t, k.Client, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + user, Namespace: role.Namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
		default:
			t.Fatalf("unexpected kind %s in %s", u.GetKind(), file)
		}
	}
}

func fromUnstructured(t TB, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("convert %s: %v", u.GetKind(), err)
	}
}

func createOrKeep(t TB, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// FreePort returns a TCP port free on 127.0.0.1 right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
