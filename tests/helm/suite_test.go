// Package helm tests the Helm chart (charts/scality-s3-csi-driver) and the image recipe
// (Dockerfile) without a cluster or a Docker engine:
//
//   - helm lint, and helm template for each mode (systemd, pod, mixed) against golden files
//     (`make helm-golden` rewrites them) and targeted assertions on
//     what each mode renders;
//   - every rendered object applied with server-side dry-run to a real kube-apiserver (envtest),
//     and the RBAC applied for real and checked with SubjectAccessReviews;
//   - the values schema rejecting bad values, naming them;
//   - the flags the chart renders accepted by the real binaries (bin/, built by make);
//   - the Dockerfile placing every binary where the chart and the binaries expect it, and
//     cmd/ building from its build context with its flags;
//   - the chart's CRD copy and the values documentation in docs/configuration.md.
package helm

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

var update = flag.Bool("update", false, "rewrite the golden files and the Helm values section of docs/configuration.md")

const (
	release   = "s3-csi"
	namespace = "s3-csi"
)

// mode is one values file of testdata/ and what it selects.
type mode struct {
	name          string // testdata/values-<name>.yaml, testdata/golden/<name>.yaml
	defaultMode   string
	systemd, pod  bool   // modes in use
	mpNamespace   string // the Mountpoint Pods' namespace
	kubeletPath   string
	secretNSAll   bool     // provisioner may read Secrets everywhere
	secretNS      []string // else: only these
	hasCredential bool     // s3.credentials.secretName set
	systemdSocket string   // node.systemdSocket (systemd mode)
	sidecars      bool     // node.registration: sidecars (else builtin)
	headroom      bool     // mountpointPod.headroom.enabled
	restartPods   bool     // node.restartPods: the node plugin may delete workload pods
	caBundle      bool     // tls.caBundle set
}

var modes = []mode{
	{name: "systemd", defaultMode: "systemd", systemd: true, mpNamespace: "mount-s3", kubeletPath: "/var/lib/kubelet", hasCredential: true, systemdSocket: "/run/systemd/private"},
	{name: "pod", defaultMode: "pod", pod: true, mpNamespace: "s3-mounts", kubeletPath: "/var/lib/k0s/kubelet", secretNS: []string{"team-a"}, headroom: true},
	{name: "mixed", defaultMode: "systemd", systemd: true, pod: true, mpNamespace: "mount-s3", kubeletPath: "/var/lib/kubelet", secretNSAll: true, hasCredential: true,
		systemdSocket: "/run/host-systemd/private", sidecars: true, restartPods: true, caBundle: true},
}

func (m mode) valuesFile() string { return filepath.Join("testdata", "values-"+m.name+".yaml") }

// render renders the chart with the mode's values file and extra helm arguments.
func (m mode) render(t *testing.T, args ...string) (string, []*unstructured.Unstructured) {
	t.Helper()
	out, err := harness.HelmTemplate(t, release, namespace, append([]string{"--values", m.valuesFile()}, args...)...)
	if err != nil {
		t.Fatalf("helm template (%s): %v", m.name, err)
	}
	objs, err := harness.DecodeManifests(out)
	if err != nil {
		t.Fatalf("%s: %v", m.name, err)
	}
	return out, objs
}

var (
	kubeOnce sync.Once
	kube     *harness.Kube
	mainTB   *harness.MainTB
)

// apiServer starts one kube-apiserver (envtest, with the project's CRD from crd/) for the
// whole package, on first use; TestMain stops it.
func apiServer(t *testing.T) *harness.Kube {
	t.Helper()
	kubeOnce.Do(func() {
		mainTB = harness.NewMainTB()
		kube = harness.StartAPIServer(mainTB, harness.KubeOptions{})
	})
	if kube == nil {
		t.Fatal("kube-apiserver did not start (see the first failure)")
	}
	return kube
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if mainTB != nil {
		mainTB.Close()
	}
	os.Exit(code)
}

// find returns the rendered objects of a kind (and name, when not empty), in order.
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single rendered object of a kind and name, failing otherwise.
func one(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	got := find(objs, kind, name)
	if len(got) != 1 {
		t.Fatalf("want one %s %q, rendered %d", kind, name, len(got))
	}
	return got[0]
}

// keys returns the sorted keys of a set.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ourBinaries are the project's binaries (cmd/), the ones the chart may run.
var ourBinaries = []string{"scality-s3-csi-driver", "scality-csi-controller", "scality-csi-mounter", "install-mp"}

// ourBinary returns the binary a container runs when it is one of the project's.
func ourBinary(command []string) (string, bool) {
	if len(command) == 0 {
		return "", false
	}
	name := filepath.Base(command[0])
	for _, b := range ourBinaries {
		if b == name {
			return name, strings.HasPrefix(command[0], "/")
		}
	}
	return "", false
}
