package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// ChartDir returns the path of the driver's Helm chart.
func ChartDir() string {
	return filepath.Join(RepoRoot(), "charts", "scality-s3-csi-driver")
}

// OfflineValues is the values file an offline render of the chart needs (the values only a
// cluster could tell, set as for a new install): testdata/offline-values.yaml.
func OfflineValues() string {
	return filepath.Join(RepoRoot(), "tests", "harness", "testdata", "offline-values.yaml")
}

// HelmTemplate runs `helm template <release> <chart> --namespace <namespace> -f OfflineValues()
// <args...>` with the helm make installs into bin/ and returns what it printed: the manifests on
// success, helm's error message (stderr) otherwise. The test's own values files and --set come
// after OfflineValues and win. It never fails the test itself, so tests can expect errors.
func HelmTemplate(t TB, release, namespace string, args ...string) (string, error) {
	t.Helper()
	return Helm(t, append([]string{"template", release, ChartDir(), "--namespace", namespace, "-f", OfflineValues()}, args...)...)
}

// Helm runs bin/helm with args (at most one minute) and returns its standard output, or an
// error holding its standard error.
func Helm(t TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Bin(t, "helm"), args...)
	// No user configuration, repositories or plugins: the chart alone decides the output.
	dir := t.TempDir()
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "HELM_CACHE_HOME=" + dir, "HELM_CONFIG_HOME=" + dir, "HELM_DATA_HOME=" + dir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return stdout.String(), fmt.Errorf("helm %v: %w: %s", args, err, stderr.String())
		}
		return stdout.String(), nil
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		return "", fmt.Errorf("helm %v: timed out after a minute (killed: %v)", args, <-done)
	}
}

// DecodeManifests splits multi-document YAML (helm template output) into objects, skipping
// empty documents.
func DecodeManifests(data string) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
