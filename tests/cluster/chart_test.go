package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// command runs a program with the rig's client environment (and nothing else of this
// process's: no ambient AWS_* variables), bounded by timeout.
func command(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"HOME=" + rig.DataDir}, rig.ClientEnv(env.bin)...)
	// Standard output only on success: kubectl exec prints stream notices on its standard
	// error that are not the command's output.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// chartValues are the suite's Helm values: both modes in use, systemd by default, the rig's
// S3 server and systemd socket, the locally built image, and driver-level credentials.
func chartValues() string {
	return fmt.Sprintf(`mounter:
  defaultMode: systemd
  modesInUse: [systemd, pod]
s3:
  endpointUrl: %s
  region: us-east-1
  credentials:
    secretName: %s
image:
  repository: %s
  tag: %s
node:
  systemdSocket: %s
  restartPods: true
`, rig.S3Endpoint(), credentialsSc, rig.DriverRepository, rig.DriverTag, rig.SystemdSocket())
}

// installChart installs the chart as docs/install.md says: the credentials Secret, helm
// install, then waiting for both rollouts to finish.
func installChart(t *testing.T, extra ...string) {
	t.Helper()
	installChartFrom(t, harness.ChartDir(), extra...)
}

// previousChart is the previous release of the chart, packaged (helm package --version 0.0.10)
// from the chart at commit 2ae28ef, the first with the selectors of Scality's releases (the
// selectors never change, so no earlier chart upgrades to this one: none was released), as
// users get a released chart.
func previousChart() string {
	return filepath.Join(harness.RepoRoot(), "tests", "cluster", "testdata", "scality-s3-csi-driver-0.0.10.tgz")
}

// installChartFrom is installChart with another chart (a directory or a packaged chart).
func installChartFrom(t *testing.T, chart string, extra ...string) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentialsSc, Namespace: releaseNS},
		StringData: map[string]string{"access_key_id": rig.S3AccessKey, "secret_access_key": rig.S3SecretKey}}
	if err := env.c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the credentials Secret: %v", err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	harness.Must(t, os.WriteFile(values, []byte(chartValues()), 0o600))
	verb := "install"
	if _, err := helm(t, "status", release, "-n", releaseNS); err == nil {
		// A development run against a rig that already has the release (rigctl up, then the
		// suite more than once): bring it to this chart and these values.
		t.Logf("release %s exists: helm upgrade instead of install", release)
		verb = "upgrade"
	}
	args := append([]string{verb, release, chart, "-n", releaseNS, "-f", values}, extra...)
	mustRun(t)(helm(t, args...))
	waitRollout(t)
}

// waitRollout waits, like docs/install.md tells users to, until the node DaemonSet, the
// controller Deployment and, with pod mode in use, the Pod Reconciler's have rolled out.
func waitRollout(t *testing.T) {
	t.Helper()
	mustRun(t)(kubectl(t, "-n", releaseNS, "rollout", "status", "ds/s3-csi-node", "--timeout=3m"))
	mustRun(t)(kubectl(t, "-n", releaseNS, "rollout", "status", "deploy/s3-csi-controller", "--timeout=3m"))
	var rec appsv1.Deployment
	if err := env.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "s3-pod-reconciler"}, &rec); err == nil {
		mustRun(t)(kubectl(t, "-n", releaseNS, "rollout", "status", "deploy/s3-pod-reconciler", "--timeout=3m"))
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
