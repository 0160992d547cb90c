package helm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/s3csi/s3-csi-driver/pkg/pluginoptions"
	"github.com/s3csi/s3-csi-driver/pkg/reconcileroptions"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// agreeCase is one value (a values file over values-mixed.yaml, where both modes, a CA bundle
// and the fallback are in use) the chart turns into a flag of a binary; valid says what the
// case's author expects of both, so that a case where the chart and the binaries agree on the
// wrong answer fails too.
type agreeCase struct {
	name, values string
	valid        bool
}

// agreeCases are boundary cases of every value the chart renders as a flag of one of the
// project's binaries (node plugin, CSI controller, Pod Reconciler).
func agreeCases(t *testing.T) []agreeCase {
	cert := testCertificate(t)
	indent := func(s string) string { return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") + "\n" }
	var cs []agreeCase
	add := func(valid bool, name, values string) { cs = append(cs, agreeCase{name, values, valid}) }
	// mountpointPod.cacheSizeLimit: --mountpoint-cache-size-limit (node plugin, Pod Reconciler).
	for v, ok := range map[string]bool{"5Gi": true, "128Mi": true, "\"134217728\"": true, "127Mi": false, "64Mi": false, "100M": false, "\"0\"": false, "big": false, "\"1e9\"": true, "null": true} {
		add(ok, "cacheSizeLimit "+v, "mountpointPod:\n  cacheSizeLimit: "+v+"\n")
	}
	// mountpointPod.resources: --mountpoint-{cpu,memory}-{request,limit} (both).
	res := func(reqCPU, reqMem, limCPU, limMem string) string {
		return fmt.Sprintf("mountpointPod:\n  resources:\n    requests:\n      cpu: %s\n      memory: %s\n    limits:\n      cpu: %s\n      memory: %s\n", reqCPU, reqMem, limCPU, limMem)
	}
	add(true, "resources defaults with limits", res("50m", "128Mi", "1", "1Gi"))
	add(true, "memory request at its limit", res("50m", "1Gi", "null", "1Gi"))
	add(false, "memory request above its limit", res("50m", "2Gi", "null", "1Gi"))
	add(true, "CPU request at its limit", res("1", "128Mi", "1", "null"))
	add(false, "CPU request above its limit", res("2", "128Mi", "1", "null"))
	add(false, "memory limit below 640Mi", res("50m", "128Mi", "null", "639Mi"))
	add(true, "memory limit at 640Mi", res("50m", "128Mi", "null", "640Mi"))
	add(false, "memory request zero", res("50m", "\"0\"", "null", "null"))
	add(false, "CPU request zero", res("\"0\"", "128Mi", "null", "null"))
	add(false, "CPU request negative", res("-1", "128Mi", "null", "null"))
	add(false, "memory request not a quantity", res("50m", "lots", "null", "null"))
	add(true, "no requests", res("null", "null", "null", "null"))
	// node.systemdSliceLimits: --systemd-slice-{memory-max,cpu-limit}.
	add(true, "slice memory", "node:\n  systemdSliceLimits:\n    memory: 8Gi\n    cpu: \"4\"\n")
	add(false, "slice memory zero", "node:\n  systemdSliceLimits:\n    memory: \"0\"\n")
	add(false, "slice CPU not a quantity", "node:\n  systemdSliceLimits:\n    cpu: four\n")
	// proxy: --https-proxy, --http-proxy, --no-proxy (node plugin, CSI controller).
	for v, ok := range map[string]bool{"http://proxy:3128": true, "https://proxy.example.com:3128": true, "http://[fd00::1]:3128": true, "http://proxy:3128/": true,
		"proxy:3128": false, "proxy.example.com": false, "http://user:pass@proxy:3128": false, "http://user@proxy:3128": false, "socks5://proxy:1080": false, "http://proxy:3128/path": false, "http://": false} {
		add(ok, "httpsProxy "+v, "proxy:\n  httpsProxy: \""+v+"\"\n")
	}
	add(false, "httpProxy with credentials", "proxy:\n  httpProxy: http://u:p@proxy:3128\n")
	add(false, "httpProxy without scheme", "proxy:\n  httpProxy: proxy:3128\n")
	for v, ok := range map[string]bool{".example.com,10.0.0.0/8": true, "localhost": true, "a,,b": false, "a b": false, "a/b": false, "user@host": false} {
		add(ok, "noProxy "+v, "proxy:\n  httpsProxy: http://proxy:3128\n  noProxy: \""+v+"\"\n")
	}
	// s3: --s3-endpoint-url, --s3-region.
	for v, ok := range map[string]bool{"https://s3.example.com": true, "http://10.0.0.1:8000": true, "s3.example.com": false, "ftp://s3.example.com": false, "https://": false} {
		add(ok, "endpointUrl "+v, "s3:\n  endpointUrl: \""+v+"\"\n")
	}
	add(false, "region empty", "s3:\n  region: \"\"\n")
	// node.mountS3User: --mount-s3-user.
	for v, ok := range map[string]bool{"s3csi-mount": true, "_s3": true, "\"\"": true, "root": false, "\"0\"": false, "\"1000\"": false, "S3": false, "a-very-long-user-name-of-32-chars": false, "../x": false} {
		add(ok, "mountS3User "+v, "node:\n  mountS3User: "+v+"\n")
	}
	// mounter.systemdFallbackAfter: --systemd-fallback-after.
	for v, ok := range map[string]bool{"1s": true, "45s": true, "90s": true, "91s": false, "1m": false, "2m": false, "0s": false, "500ms": false, "-1s": false, "30": false} {
		add(ok, "systemdFallbackAfter "+v, "mounter:\n  systemdFallbackAfter: \""+v+"\"\n")
	}
	// Durations of the node plugin and the CSI controller.
	for _, key := range []string{"node:\n  mountTimeout", "node:\n  podSweepInterval", "node:\n  apiTimeout", "controller:\n  emptyBucketBudget"} {
		for v, ok := range map[string]bool{"1s": true, "90s": true, "1m30s": true, "0s": false, "60": false, "-5s": false} {
			// values-mixed.yaml's controller.extraArgs sets --empty-bucket-budget after the chart's.
			add(ok, strings.ReplaceAll(key, "\n  ", ".")+" "+v, key+": \""+v+"\"\n  extraArgs: []\n")
		}
	}
	add(false, "maxVolumesPerNode negative", "node:\n  maxVolumesPerNode: -1\n")
	add(false, "kubeletPath relative", "node:\n  kubeletPath: var/lib/kubelet\n")
	add(false, "systemdSocket relative", "node:\n  systemdSocket: run/systemd/private\n")
	add(false, "mountS3InstallDir relative", "node:\n  mountS3InstallDir: opt/bin\n")
	// tls.caBundle: --s3-ca-bundle, read at start-up by the node plugin and the CSI controller.
	add(true, "CA bundle a certificate", "tls:\n  caBundle: |\n"+indent(cert))
	add(true, "CA bundle two certificates", "tls:\n  caBundle: |\n"+indent(cert+cert))
	add(false, "CA bundle not PEM", "tls:\n  caBundle: not-a-certificate\n")
	add(false, "CA bundle with a bad body", "tls:\n  caBundle: |\n    -----BEGIN CERTIFICATE-----\n    x\n    -----END CERTIFICATE-----\n")
	add(false, "CA bundle truncated", "tls:\n  caBundle: |\n"+indent(truncatedPEM(cert)))
	add(false, "CA bundle a key", "tls:\n  caBundle: |\n    -----BEGIN PRIVATE KEY-----\n    MC4CAQAwBQYDK2VwBCIEIFq1\n    -----END PRIVATE KEY-----\n")
	add(false, "CA bundle without its end line", "tls:\n  caBundle: |\n"+indent(strings.Replace(cert, "-----END CERTIFICATE-----", "", 1)))
	// Mountpoint Pods: --mountpoint-security-context, --mountpoint-labels, --mountpoint-annotations,
	// --mountpoint-tolerations, --mountpoint-image-pull-secrets, --mountpoint-namespace.
	add(true, "security context SELinux", "mountpointPod:\n  securityContext:\n    seLinuxOptions:\n      level: s0:c1,c2\n")
	add(false, "security context SELinux unknown key", "mountpointPod:\n  securityContext:\n    seLinuxOptions:\n      levl: s0\n")
	add(false, "security context SELinux user", "mountpointPod:\n  securityContext:\n    seLinuxOptions:\n      user: system_u\n")
	add(true, "security context seccomp localhost", "mountpointPod:\n  securityContext:\n    seccompProfile:\n      type: Localhost\n      localhostProfile: profiles/mount-s3.json\n")
	add(false, "security context seccomp unknown key", "mountpointPod:\n  securityContext:\n    seccompProfile:\n      type: RuntimeDefault\n      profile: x\n")
	add(true, "labels", "mountpointPod:\n  labels:\n    team: storage\n")
	add(false, "label of the driver", "mountpointPod:\n  labels:\n    s3.csi.scality.com/volume-name: x\n")
	add(false, "label value too long", "mountpointPod:\n  labels:\n    team: "+strings.Repeat("x", 64)+"\n")
	add(false, "label key invalid", "mountpointPod:\n  labels:\n    \"-team\": x\n")
	add(true, "annotation", "mountpointPod:\n  annotations:\n    sidecar.istio.io/inject: \"false\"\n")
	add(false, "annotation key invalid", "mountpointPod:\n  annotations:\n    \"a b\": x\n")
	add(false, "toleration unknown key", "mountpointPod:\n  tolerations:\n    - operator: Exists\n      effekt: NoSchedule\n")
	add(true, "pull secret", "mountpointPod:\n  imagePullSecrets: [regcred]\n")
	add(false, "pull secret not a name", "mountpointPod:\n  imagePullSecrets: [Reg_Cred]\n")
	add(false, "Mountpoint Pod namespace invalid", "mountpointPod:\n  namespace: Mount_S3\n")
	return cs
}

// TestValuesAgreeWithBinaries renders the chart with each case of agreeCases and runs the flags
// the rendered node DaemonSet and Deployments pass to the project's binaries through those
// binaries' own validation (pluginoptions.Parse and ReadCABundle, reconcileroptions.Parse: what
// their main runs before starting), with the CA bundle the chart's ConfigMap holds: the chart
// accepts a value exactly when every binary accepts what it renders from it, so no value that
// renders makes a binary exit at start-up (on every node, for the node plugin).
func TestValuesAgreeWithBinaries(t *testing.T) {
	for _, v := range []string{"CSI_NODE_NAME", "AWS_ENDPOINT_URL", "AWS_REGION", "POD_NAMESPACE"} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	for i, tc := range agreeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(dir, fmt.Sprintf("case-%d.yaml", i))
			if err := os.WriteFile(f, []byte(tc.values), 0o600); err != nil {
				t.Fatal(err)
			}
			out, chartErr := harness.HelmTemplate(t, release, namespace, "--values", modes[2].valuesFile(), "--values", f)
			var binErr error
			if chartErr == nil {
				objs, err := harness.DecodeManifests(out)
				if err != nil {
					t.Fatal(err)
				}
				binErr = validateRendered(t, objs)
			}
			switch {
			case chartErr == nil && binErr != nil:
				t.Errorf("the chart renders\n%sbut a binary refuses it at start-up: %v", tc.values, binErr)
			case chartErr != nil && binErr == nil && tc.valid:
				t.Errorf("the chart refuses\n%s(%v), which the binaries accept", tc.values, chartErr)
			case chartErr == nil && !tc.valid:
				t.Errorf("chart and binaries accept\n%swhich this case expects refused", tc.values)
			}
		})
	}
}

// validateRendered runs each project binary's flag validation on the arguments its containers
// get (Downward-API and Secret variables as placeholders) and returns the refusals, joined.
func validateRendered(t *testing.T, objs []*unstructured.Unstructured) error {
	t.Helper()
	var errs []error
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		spec := typedPodSpec(t, o.Object)
		for _, c := range spec.Containers {
			name, _ := ourBinary(c.Command)
			args := expand(c.Args, c.Env)
			where := o.GetName() + "/" + c.Name
			switch name {
			case "scality-s3-csi-driver":
				opts, err := pluginoptions.Parse(args)
				if err == nil && opts.S3CABundle != "" {
					_, err = pluginoptions.ReadCABundle(caBundleFile(t, objs, o.GetNamespace(), spec, c, opts.S3CABundle))
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				}
			case "scality-csi-controller":
				if _, _, err := reconcileroptions.Parse(args); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// caBundleFile writes the file a container sees at path (a key of a rendered ConfigMap,
// through the container's volume mounts) to a temporary file and returns its name.
func caBundleFile(t *testing.T, objs []*unstructured.Unstructured, ns string, spec corev1.PodSpec, c corev1.Container, path string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			key := rel
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			var data string
			for _, cm := range find(objs, "ConfigMap", v.ConfigMap.Name) {
				if cm.GetNamespace() == ns {
					data, _, _ = unstructured.NestedString(cm.Object, "data", key)
				}
			}
			f := filepath.Join(t.TempDir(), "ca-bundle.crt")
			if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s: no ConfigMap volume holds %s", c.Name, path)
	return ""
}

// testCertificate returns a self-signed CA certificate, PEM-encoded.
func testCertificate(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agree CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// truncatedPEM re-encodes a certificate without its last 40 bytes: valid base64, not a
// certificate.
func truncatedPEM(cert string) string {
	b, _ := pem.Decode([]byte(cert))
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes[:len(b.Bytes)-40]}))
}
