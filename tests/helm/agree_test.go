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
// wrong answer fails too. flags are the arguments the value becomes (--name=value): when the
// chart refuses the value, the binaries get those flags over the default rendering's and must
// refuse them too, so that the chart is no stricter than the binaries.
type agreeCase struct {
	name, values string
	valid        bool
	flags        []string
}

// unquote returns a YAML scalar of a case as the flag gets it: without its quotes.
func unquote(v string) string { return strings.Trim(v, "\"") }

// agreeCases are boundary cases of every value the chart renders as a flag of one of the
// project's binaries (node plugin, CSI controller, Pod Reconciler).
func agreeCases(t *testing.T) []agreeCase {
	cert := testCertificate(t)
	indent := func(s string) string { return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") + "\n" }
	var cs []agreeCase
	add := func(valid bool, name, values string, flags ...string) {
		cs = append(cs, agreeCase{name, values, valid, flags})
	}
	// mountpointPod.cacheSizeLimit: --mountpoint-cache-size-limit (node plugin, Pod Reconciler).
	for v, ok := range map[string]bool{"5Gi": true, "128Mi": true, "\"134217728\"": true, "127Mi": false, "64Mi": false, "100M": false, "\"0\"": false, "big": false,
		"\"1e9\"": true, "1.5Gi": true, ".5Gi": true, "0.125Gi": true, "\"+1Gi\"": true, "1E9": true, "134217728000m": true, "134217727000m": false, "-1Gi": false, "1Gb": false, "5 Gi": false} {
		add(ok, "cacheSizeLimit "+v, "mountpointPod:\n  cacheSizeLimit: "+v+"\n", "--mountpoint-cache-size-limit="+unquote(v))
	}
	add(true, "cacheSizeLimit null", "mountpointPod:\n  cacheSizeLimit: null\n")
	// mountpointPod.resources: --mountpoint-{cpu,memory}-{request,limit} (both).
	res := func(reqCPU, reqMem, limCPU, limMem string) (string, []string) {
		var flags []string
		for _, f := range [][2]string{{"cpu-request", reqCPU}, {"memory-request", reqMem}, {"cpu-limit", limCPU}, {"memory-limit", limMem}} {
			if f[1] != "null" {
				flags = append(flags, "--mountpoint-"+f[0]+"="+unquote(f[1]))
			}
		}
		return fmt.Sprintf("mountpointPod:\n  resources:\n    requests:\n      cpu: %s\n      memory: %s\n    limits:\n      cpu: %s\n      memory: %s\n", reqCPU, reqMem, limCPU, limMem), flags
	}
	addRes := func(valid bool, name, reqCPU, reqMem, limCPU, limMem string) {
		values, flags := res(reqCPU, reqMem, limCPU, limMem)
		add(valid, name, values, flags...)
	}
	addRes(true, "resources defaults with limits", "50m", "128Mi", "1", "1Gi")
	addRes(true, "memory request at its limit", "50m", "1Gi", "null", "1Gi")
	addRes(false, "memory request above its limit", "50m", "2Gi", "null", "1Gi")
	addRes(true, "CPU request at its limit", "1", "128Mi", "1", "null")
	addRes(false, "CPU request above its limit", "2", "128Mi", "1", "null")
	addRes(true, "CPU request in thousandths at its limit", "1000m", "128Mi", "1", "null")
	addRes(true, "CPU as a fraction", "0.05", "128Mi", "0.5", "null")
	addRes(false, "memory limit below 640Mi", "50m", "128Mi", "null", "639Mi")
	addRes(true, "memory limit at 640Mi", "50m", "128Mi", "null", "640Mi")
	addRes(true, "memory limit with an exponent", "50m", "128Mi", "null", "1e9")
	addRes(false, "memory request zero", "50m", "\"0\"", "null", "null")
	addRes(false, "CPU request zero", "\"0\"", "128Mi", "null", "null")
	addRes(false, "CPU request negative", "-1", "128Mi", "null", "null")
	addRes(false, "memory request not a quantity", "50m", "lots", "null", "null")
	addRes(false, "CPU request with a unit of memory in words", "50m", "128MB", "null", "null")
	addRes(true, "no requests", "null", "null", "null", "null")
	// node.systemdSliceLimits: --systemd-slice-{memory-max,cpu-limit}.
	add(true, "slice memory", "node:\n  systemdSliceLimits:\n    memory: 8Gi\n    cpu: \"4\"\n", "--systemd-slice-memory-max=8Gi", "--systemd-slice-cpu-limit=4")
	add(true, "slice CPU in thousandths", "node:\n  systemdSliceLimits:\n    cpu: 1500m\n", "--systemd-slice-cpu-limit=1500m")
	add(false, "slice memory zero", "node:\n  systemdSliceLimits:\n    memory: \"0\"\n", "--systemd-slice-memory-max=0")
	add(false, "slice CPU not a quantity", "node:\n  systemdSliceLimits:\n    cpu: four\n", "--systemd-slice-cpu-limit=four")
	// proxy: --https-proxy, --http-proxy, --no-proxy (node plugin, CSI controller).
	for v, ok := range map[string]bool{"http://proxy:3128": true, "https://proxy.example.com:3128": true, "http://[fd00::1]:3128": true, "http://proxy:3128/": true,
		"proxy:3128": false, "proxy.example.com": false, "http://user:pass@proxy:3128": false, "http://user@proxy:3128": false, "socks5://proxy:1080": false, "http://proxy:3128/path": false, "http://": false,
		"http://proxy:3128\\t": false, "http://proxy\\u200b:3128": false} {
		add(ok, "httpsProxy "+v, "proxy:\n  httpsProxy: \""+v+"\"\n", "--https-proxy="+strings.NewReplacer("\\t", "\t", "\\u200b", "\u200b").Replace(v))
	}
	add(false, "httpProxy with credentials", "proxy:\n  httpProxy: http://u:p@proxy:3128\n", "--http-proxy=http://u:p@proxy:3128")
	add(false, "httpProxy without scheme", "proxy:\n  httpProxy: proxy:3128\n", "--http-proxy=proxy:3128")
	for v, ok := range map[string]bool{".example.com,10.0.0.0/8": true, "localhost": true, "a,,b": false, "a b": false, "a/b": false, "user@host": false,
		"a, b": true, " .example.com , localhost ": true, "10.1.2.3/32,fd00::/8": true, "999.0.0.0/8": false, "10.0.0.0/33": false, "a,\\tb": false,
		"10.0.0.0/08": true, "010.0.0.0/8": false, "fd00:::1/64": false, "1:2:3:4:5:6:7:8/64": true, "::/0": true, "::ffff:10.0.0.0/104": true, "fd00::g/8": false,
		"1:2:3:4:5:6:1.2.3.4/96": true, "::1.2.3.4/96": true, "fd00::/0128": true, "fd00::/129": false, "fd00::1": true} {
		add(ok, "noProxy "+v, "proxy:\n  httpsProxy: http://proxy:3128\n  noProxy: \""+v+"\"\n", "--https-proxy=http://proxy:3128", "--no-proxy="+strings.ReplaceAll(v, "\\t", "\t"))
	}
	// s3: --s3-endpoint-url, --s3-region.
	for v, ok := range map[string]bool{"https://s3.example.com": true, "http://10.0.0.1:8000": true, "s3.example.com": false, "ftp://s3.example.com": false, "https://": false} {
		add(ok, "endpointUrl "+v, "s3:\n  endpointUrl: \""+v+"\"\n", "--s3-endpoint-url="+v)
	}
	add(false, "region empty", "s3:\n  region: \"\"\n", "--s3-region=")
	// node.mountS3User: --mount-s3-user.
	for v, ok := range map[string]bool{"s3csi-mount": true, "_s3": true, "\"\"": true, "root": false, "\"0\"": false, "\"1000\"": false, "S3": false, "a-very-long-user-name-of-32-chars": false, "../x": false} {
		add(ok, "mountS3User "+v, "node:\n  mountS3User: "+v+"\n", "--mount-s3-user="+unquote(v))
	}
	// node.mountS3ProtectSystem: --mount-s3-protect-system, refused with paths its units do
	// not see (with node.kubeletPath: --kubelet-path, node.mountS3InstallDir: --mount-s3-path).
	add(true, "mountS3ProtectSystem true", "node:\n  mountS3ProtectSystem: true\n", "--mount-s3-protect-system")
	add(true, "mountS3ProtectSystem false", "node:\n  mountS3ProtectSystem: false\n")
	add(false, "mountS3ProtectSystem yes", "node:\n  mountS3ProtectSystem: \"yes\"\n", "--mount-s3-protect-system=yes")
	for _, dir := range []string{"/tmp/kubelet", "/var/tmp", "/home/k", "/root/kubelet", "/run/user/0/kubelet"} {
		add(false, "mountS3ProtectSystem with kubeletPath "+dir, "node:\n  mountS3ProtectSystem: true\n  kubeletPath: "+dir+"\n", "--mount-s3-protect-system", "--kubelet-path="+dir)
	}
	add(true, "kubeletPath /tmp/kubelet without mountS3ProtectSystem", "node:\n  kubeletPath: /tmp/kubelet\n", "--kubelet-path=/tmp/kubelet")
	add(true, "mountS3ProtectSystem with kubeletPath /tmpfs/kubelet", "node:\n  mountS3ProtectSystem: true\n  kubeletPath: /tmpfs/kubelet\n", "--mount-s3-protect-system", "--kubelet-path=/tmpfs/kubelet")
	add(false, "mountS3ProtectSystem with mountS3InstallDir /root/bin", "node:\n  mountS3ProtectSystem: true\n  mountS3InstallDir: /root/bin\n", "--mount-s3-protect-system", "--mount-s3-path=/root/bin/mount-s3")
	// mounter.systemdFallbackAfter: --systemd-fallback-after.
	for v, ok := range map[string]bool{"1s": true, "45s": true, "90s": true, "1m": true, "1m30s": true, "0s": true, "500ms": true, "90000ms": true, ".5m": true,
		"91s": false, "1m31s": false, "2m": false, "-1s": false, "30": false, "45 s": false, "1d": false} {
		add(ok, "systemdFallbackAfter "+v, "mounter:\n  systemdFallbackAfter: \""+v+"\"\n", "--systemd-fallback-after="+v)
	}
	// Durations of the node plugin and the CSI controller.
	for key, flag := range map[string]string{"node:\n  mountTimeout": "--mount-timeout", "node:\n  podSweepInterval": "--pod-sweep-interval", "node:\n  apiTimeout": "--api-timeout", "controller:\n  emptyBucketBudget": "--empty-bucket-budget"} {
		for v, ok := range map[string]bool{"1s": true, "90s": true, "1m30s": true, "1.5m": true, "2h": true, "0s": false, "0": false, "60": false, "-5s": false, "abc": false, "5 s": false} {
			// values-mixed.yaml's controller.extraArgs sets --empty-bucket-budget after the chart's.
			add(ok, strings.ReplaceAll(key, "\n  ", ".")+" "+v, key+": \""+v+"\"\n  extraArgs: []\n", flag+"="+v)
		}
	}
	add(false, "maxVolumesPerNode negative", "node:\n  maxVolumesPerNode: -1\n", "--max-volumes-per-node=-1")
	add(false, "kubeletPath relative", "node:\n  kubeletPath: var/lib/kubelet\n", "--kubelet-path=var/lib/kubelet")
	add(false, "systemdSocket relative", "node:\n  systemdSocket: run/systemd/private\n", "--systemd-socket=run/systemd/private")
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
	_, base := modes[2].render(t)
	if err := validateRendered(t, base); err != nil {
		t.Fatalf("the binaries refuse values-mixed.yaml's rendering: %v", err)
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
			} else if len(tc.flags) > 0 {
				// What the chart would have rendered: the default rendering with the case's flags.
				binErr = validateRendered(t, withFlags(t, base, tc.flags))
			}
			switch {
			case chartErr == nil && binErr != nil:
				t.Errorf("the chart renders\n%sbut a binary refuses it at start-up: %v", tc.values, binErr)
			case chartErr != nil && len(tc.flags) > 0 && binErr == nil:
				t.Errorf("the chart refuses\n%s(%v), but the binaries accept it as %v", tc.values, chartErr, tc.flags)
			case chartErr != nil && binErr == nil && tc.valid:
				t.Errorf("the chart refuses\n%s(%v), which the binaries accept", tc.values, chartErr)
			case chartErr == nil && !tc.valid:
				t.Errorf("chart and binaries accept\n%swhich this case expects refused", tc.values)
			case chartErr != nil && !strings.Contains(chartErr.Error(), "execution error") && !strings.Contains(chartErr.Error(), "values don't meet the specifications of the schema"):
				t.Errorf("the chart refuses\n%swith an error that is neither a check's nor the schema's: %v", tc.values, chartErr)
			}
		})
	}
}

// withFlags returns copies of objs whose containers running the node plugin's binary (node
// plugin, CSI controller) or the Pod Reconciler's get flags ("--name=value"), each replacing
// every occurrence of its name: in the containers that have the flag, or, when none has it, in
// every container of scality-s3-csi-driver.
func withFlags(t *testing.T, objs []*unstructured.Unstructured, flags []string) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		has := func(args []string) bool {
			for _, a := range args {
				if a == name || strings.HasPrefix(a, name+"=") {
					return true
				}
			}
			return false
		}
		anywhere := false
		eachOurContainer(t, out, func(bin string, c map[string]any) {
			anywhere = anywhere || has(stringsOf(c["args"]))
		})
		changed := false
		eachOurContainer(t, out, func(bin string, c map[string]any) {
			args := stringsOf(c["args"])
			if !has(args) && (anywhere || bin != "scality-s3-csi-driver") {
				return
			}
			kept := make([]any, 0, len(args)+1)
			for _, a := range args {
				if a != name && !strings.HasPrefix(a, name+"=") {
					kept = append(kept, a)
				}
			}
			c["args"] = append(kept, f)
			changed = true
		})
		if !changed {
			t.Fatalf("no container of the rendering takes %s", name)
		}
	}
	return out
}

// eachOurContainer calls fn with each container (as unstructured) of the DaemonSets and
// Deployments of objs that runs one of the project's binaries, and the binary's name.
func eachOurContainer(t *testing.T, objs []*unstructured.Unstructured, fn func(bin string, c map[string]any)) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for i := range cs {
			c := cs[i].(map[string]any)
			if bin, _ := ourBinary(stringsOf(c["command"])); bin != "" {
				fn(bin, c)
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
}

func stringsOf(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
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
