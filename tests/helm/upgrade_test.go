package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// chartDefaultsLine is values.yaml's digest line.
var chartDefaultsLine = regexp.MustCompile(`(?m)^chartDefaults: "([0-9a-f]*)"\n`)

// chartDefaultsDigest reads a chart's values.yaml and returns its chartDefaults and the
// digest it should be (SHA-256 of the file without that line, 16 hex digits).
func chartDefaultsDigest(t *testing.T, chart string) (have, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	harness.Must(t, err)
	m := chartDefaultsLine.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("values.yaml has no chartDefaults line")
	}
	sum := sha256.Sum256([]byte(chartDefaultsLine.ReplaceAllString(string(b), "")))
	return m[1], hex.EncodeToString(sum[:])[:16]
}

// chartDefaultsFiles hold the digest: values.yaml, the schema and the chart's check.
var chartDefaultsFiles = []string{"values.yaml", "values.schema.json", "templates/_helpers.tpl"}

// setChartDefaults writes a chart's digest into its three files.
func setChartDefaults(t *testing.T, chart string) {
	t.Helper()
	have, want := chartDefaultsDigest(t, chart)
	for _, f := range chartDefaultsFiles {
		p := filepath.Join(chart, f)
		b, err := os.ReadFile(p)
		harness.Must(t, err)
		harness.Must(t, os.WriteFile(p, []byte(strings.ReplaceAll(string(b), have, want)), 0o644))
	}
}

// TestChartDefaultsDigest: values.yaml's chartDefaults is the digest of the rest of the file,
// and the chart's check (s3csi.chartDefaults) and its schema know the same one; -update (make
// helm-golden) writes it after a change of the defaults.
func TestChartDefaultsDigest(t *testing.T) {
	if *update {
		setChartDefaults(t, harness.ChartDir())
	}
	have, want := chartDefaultsDigest(t, harness.ChartDir())
	if have != want {
		t.Errorf("values.yaml's chartDefaults is %s, its digest %s: run make helm-golden", have, want)
	}
	schema, err := os.ReadFile(filepath.Join(harness.ChartDir(), "values.schema.json"))
	harness.Must(t, err)
	if n := strings.Count(string(schema), `"const": "`+want+`"`); n != 2 {
		t.Errorf("values.schema.json names the digest %d times, want 2 (the property and the check)", n)
	}
	helpers, err := os.ReadFile(filepath.Join(harness.ChartDir(), "templates", "_helpers.tpl"))
	harness.Must(t, err)
	if !strings.Contains(string(helpers), `{{- define "s3csi.chartDefaults" -}}`+want+`{{- end -}}`) {
		t.Errorf("templates/_helpers.tpl's s3csi.chartDefaults is not %s", want)
	}
}

// TestReuseValuesAcrossVersions: upgraded with --reuse-values from a version of this chart
// whose defaults differ (one default changed), the chart refuses before anything changes and
// names --reset-then-reuse-values, which then upgrades with the user's values kept.
func TestReuseValuesAcrossVersions(t *testing.T) {
	k := harness.StartAPIServer(t, harness.KubeOptions{NoCRD: true})
	kubeconfig := k.Kubeconfig(t, "helm-reuse", "system:masters")
	helm := func(args ...string) (string, error) {
		return harness.Helm(t, append(args, "--kubeconfig", kubeconfig)...)
	}
	older := filepath.Join(t.TempDir(), "scality-s3-csi-driver")
	harness.Must(t, os.CopyFS(older, os.DirFS(harness.ChartDir())))
	values, err := os.ReadFile(filepath.Join(older, "values.yaml"))
	harness.Must(t, err)
	harness.Must(t, os.WriteFile(filepath.Join(older, "values.yaml"), []byte(strings.Replace(string(values), "logLevel: 2\n", "logLevel: 3\n", 1)), 0o644))
	setChartDefaults(t, older) // as that version's own test would have
	const rel, ns = "s3-csi", "reuse"
	if out, err := helm("install", rel, older, "-n", ns, "--create-namespace", "--set", "node.maxVolumesPerNode=7", "--set", "crd.install=false"); err != nil {
		t.Fatalf("install the other version: %v\n%s", err, out)
	}
	_, err = helm("upgrade", rel, harness.ChartDir(), "-n", ns, "--reuse-values")
	if err == nil || !strings.Contains(err.Error(), "these values are the defaults of another version of this chart") || !strings.Contains(err.Error(), "--reset-then-reuse-values") {
		t.Errorf("--reuse-values from another version: %v; want the refusal naming --reset-then-reuse-values", err)
	}
	out, err := helm("upgrade", rel, harness.ChartDir(), "-n", ns, "--reset-then-reuse-values", "-o", "json")
	if err != nil {
		t.Fatalf("--reset-then-reuse-values: %v\n%s", err, out)
	}
	manifest, _ := dryRunOutput(t, out)
	if !strings.Contains(manifest, "--max-volumes-per-node=7") || !strings.Contains(manifest, "--v=2") {
		t.Errorf("--reset-then-reuse-values: want the user's value (7 volumes) and this chart's default (log level 2):\n%s", manifest)
	}
}
