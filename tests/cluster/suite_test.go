// Package cluster runs the driver as users run it: the Helm chart on a real single-node
// Kubernetes cluster (tests/cluster/rig: kubelet, containerd, the control plane, a systemd
// user manager and versitygw, all inside the rig's own network namespace), next to the real
// csi-provisioner, under the upstream Kubernetes storage e2e suites and the project's own
// scenarios.
//
// It must run inside the rig's network namespace, with the rig up: `make test-cluster` does
// `bin/rigctl run -- bin/cluster.test ...`. Run elsewhere, it fails at once and says so.
package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// Release and namespace of the chart, as docs/install.md installs it.
const (
	release       = "s3-csi"
	releaseNS     = "kube-system"
	credentialsSc = "s3-credentials"
	mpNamespace   = "mount-s3"
	driverName    = "s3.csi.scality.com"
)

var (
	// env is the suite's shared state, set up once by TestMain.
	env struct {
		c     client.Client
		cs    *kubernetes.Clientset
		s3    *harness.S3Server
		bin   string
		start time.Time
	}
	timings = flag.String("timings", "", "append one line per suite step (name, seconds, result) to this file")
)

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(klog.NewKlogr())
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "cluster suite: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// setup connects to the rig's cluster and its S3 server.
func setup() error {
	if _, err := rig.LoadState(); err != nil {
		return fmt.Errorf("%w (run it with `make test-cluster`, or inside `bin/rigctl run --`)", err)
	}
	env.start = time.Now()
	env.bin = filepath.Join(harness.RepoRoot(), "bin")
	cfg, err := clientcmd.BuildConfigFromFlags("", rig.Kubeconfig())
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	if env.c, err = client.New(cfg, client.Options{Scheme: harness.Scheme()}); err != nil {
		return err
	}
	if env.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.cs.CoreV1().Nodes().Get(ctx, rig.NodeName, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("the rig's API server does not answer (is this process inside network namespace %s?): %w", rig.NetNS, err)
	}
	env.s3 = &harness.S3Server{Endpoint: rig.S3Endpoint(), Region: "us-east-1", AccessKey: rig.S3AccessKey, SecretKey: rig.S3SecretKey,
		AdminEndpoint: rig.S3AdminEndpoint()}
	return nil
}

// step times a part of the suite and records it in the -timings file; call the returned
// function at its end.
func step(t *testing.T) func() {
	start := time.Now()
	return func() {
		d := time.Since(start)
		result := "ok"
		if t.Failed() {
			result = "FAIL"
		}
		t.Logf("%s: %.1fs", t.Name(), d.Seconds())
		if *timings == "" {
			return
		}
		f, err := os.OpenFile(*timings, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s\t%.1f\t%s\n", strings.ReplaceAll(t.Name(), " ", "_"), d.Seconds(), result)
	}
}

// nodePluginLogOnFailure logs the tail of the node plugin's log when t failed: the pod, and its
// log, may be gone (a later scenario restarts or uninstalls it) by the time anyone looks.
func nodePluginLogOnFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	out, err := kubectl(t, "-n", releaseNS, "logs", "ds/s3-csi-node", "-c", "s3-plugin", "--tail=150")
	t.Logf("node plugin log, last 150 lines (%v):\n%s", err, out)
}

// kubectl runs the rig's kubectl with the admin kubeconfig and returns its combined output.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return command(t, 2*time.Minute, filepath.Join(env.bin, "k8s", "kubectl"), append([]string{"--kubeconfig=" + rig.Kubeconfig()}, args...)...)
}

// helm runs bin/helm against the rig's cluster.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return command(t, 5*time.Minute, filepath.Join(env.bin, "helm"), append([]string{"--kubeconfig=" + rig.Kubeconfig()}, args...)...)
}

// mustRun fails the test when a command fails, quoting its output: mustRun(t)(kubectl(...)).
func mustRun(t *testing.T) func(string, error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
}

// nodeObj returns the rig's Node.
func nodeObj(t *testing.T) *corev1.Node {
	t.Helper()
	var n corev1.Node
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Name: rig.NodeName}, &n))
	return &n
}
