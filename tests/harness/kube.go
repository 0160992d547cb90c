package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// Kube is a real kube-apiserver + etcd (envtest, binaries built by make into bin/k8s) with the
// project's CRD installed. No kubelet, scheduler or controller-manager runs: tests play those.
type Kube struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Client is an admin client that knows the project's types.
	Client client.Client
	Scheme *runtime.Scheme
	// AuditLog is the API server's audit log (JSON lines) when KubeOptions.Audit was set.
	AuditLog string
}

// KubeOptions configure StartAPIServer.
type KubeOptions struct {
	// Audit records every write request (metadata level) in Kube.AuditLog; AuditUsers, when
	// set, narrows that to the requests of these users (a bench's load generators then cost
	// the API server no audit event).
	Audit      bool
	AuditUsers []string
	// NoCRD leaves the CRD out: a cluster that never had this driver (or had 1.x, which has
	// none).
	NoCRD bool
	// Profiling serves kube-apiserver's /debug/pprof (a bench's look at its CPU).
	Profiling bool
}

// Scheme returns a scheme with the Kubernetes built-in types and the project's CRD types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := crdv2.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// StartAPIServer starts kube-apiserver and etcd, installs the CRD from crd/ (unless NoCRD) and
// stops both in t.Cleanup.
func StartAPIServer(t TB, o KubeOptions) *Kube {
	t.Helper()
	// The test process's own informers (fake kubelet, test clients) log through klog, like
	// the binaries; without this controller-runtime prints a warning with a stack trace.
	ctrllog.SetLogger(klog.NewKlogr())
	assets := filepath.Join(RepoRoot(), "bin", "k8s")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			t.Fatalf("%s not found in %s: run `make test` (or `make envtest-assets`) first: %v", b, assets, err)
		}
	}
	k := &Kube{Scheme: Scheme()}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                k.Scheme,
	}
	if o.NoCRD {
		env.CRDDirectoryPaths = nil
	}
	if o.Audit {
		dir := t.TempDir()
		policy := filepath.Join(dir, "audit-policy.yaml")
		// Writes only, metadata level: who did what to which object.
		users := ""
		if len(o.AuditUsers) > 0 {
			users = "\n  users: [" + strings.Join(o.AuditUsers, ", ") + "]"
		}
		content := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n" +
			"- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]" + users + "\n- level: None\n"
		if err := os.WriteFile(policy, []byte(content), 0o644); err != nil {
			t.Fatalf("audit policy: %v", err)
		}
		k.AuditLog = filepath.Join(dir, "audit.log")
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", k.AuditLog)
		args.Set("audit-log-mode", "blocking")
	}
	if o.Profiling {
		env.ControlPlane.GetAPIServer().Configure().Set("profiling", "true")
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop kube-apiserver: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: k.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	k.Env, k.Config, k.Client = env, cfg, c
	return k
}

// Kubeconfig writes a kubeconfig for a new user in groups (certificate authentication) and
// returns its path. RBAC decides what the user may do; "system:masters" may do everything.
func (k *Kube) Kubeconfig(t TB, user string, groups ...string) string {
	t.Helper()
	u, err := k.Env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("add user %s: %v", user, err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("kubeconfig for %s: %v", user, err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("kubeconfig-%s", user))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(t TB, c client.Client, name string) {
	t.Helper()
	createOrKeep(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// EnsureNamespace creates a namespace unless it exists.
func (k *Kube) EnsureNamespace(t TB, name string) { ensureNamespace(t, k.Client, name) }
