package helm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestValuesOfScalityRefused: every value of Scality's charts that this chart does not take
// (each marked deprecated in values.schema.json, which lets it through for this) is refused
// with what to use instead, never with the schema's bare "additional properties".
func TestValuesOfScalityRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(harness.ChartDir(), "values.schema.json"))
	harness.Must(t, err)
	var root struct {
		Defs map[string]schemaNode `json:"$defs"`
	}
	harness.Must(t, json.Unmarshal(b, &root))
	var paths []string
	var walk func(prefix string, props properties)
	walk = func(prefix string, props properties) {
		for _, name := range props.names {
			n := props.nodes[name]
			if n.Deprecated {
				paths = append(paths, prefix+name)
			}
			walk(prefix+name+".", n.Properties)
		}
	}
	walk("", root.Defs["values"].Properties)
	if len(paths) < 30 {
		t.Fatalf("only %d deprecated values in the schema: %v", len(paths), paths)
	}
	for _, p := range paths {
		_, err := harness.HelmTemplate(t, release, namespace, "--set", p+"=x")
		if err == nil || !strings.Contains(err.Error(), p+" is a value of Scality's ") || !strings.Contains(err.Error(), "(docs/upgrade.md)") {
			t.Errorf("--set %s=x: %v; want the refusal naming it and what to use", p, err)
		}
	}
	// 2.2.0's pair (its chart made that ConfigMap from that data) is refused as one.
	if _, err := harness.HelmTemplate(t, release, namespace, "--set", "tls.caCertConfigMap=ca", "--set", "tls.caCertData=x"); err == nil ||
		!strings.Contains(err.Error(), "use tls.caBundle with the PEM data and tls.configMapName with the caCertConfigMap's name") {
		t.Errorf("tls.caCertConfigMap with tls.caCertData: %v; want one refusal naming tls.caBundle and tls.configMapName", err)
	}
	// Taken, not refused: nameOverride (the selectors' name) and serviceAccount.create false.
	out, err := harness.HelmTemplate(t, release, namespace, "--set", "nameOverride=s3", "--set", "node.serviceAccount.create=false")
	harness.Must(t, err)
	if strings.Contains(out, "kind: ServiceAccount\nmetadata:\n  name: s3-csi-driver-sa\n") || !strings.Contains(out, "serviceAccountName: s3-csi-driver-sa") ||
		!strings.Contains(out, "app.kubernetes.io/name: s3\n") {
		t.Errorf("nameOverride and node.serviceAccount.create=false not taken:\n%s", out)
	}
}

// TestOneDefaultMode: the mode a new install gets (mounter.defaultMode empty, rendered with a
// cluster and no release there) is the node plugin's and the controller's --default-mounter
// default, mountmode.Default: one value.
func TestOneDefaultMode(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true}) // no other test's objects
	kubeconfig := k.Kubeconfig(t, "helm-default-mode", "system:masters")
	out, err := harness.Helm(t, "install", "default-mode", harness.ChartDir(), "-n", "default-mode", "--dry-run=server", "--kubeconfig", kubeconfig)
	harness.Must(t, err)
	want := "--default-mounter=" + string(mountmode.Default)
	if strings.Count(out, want) != 1 { // the node plugin (the Pod Reconciler only with pod mode)
		t.Errorf("a new install renders %q %d times, want once", want, strings.Count(out, want))
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
