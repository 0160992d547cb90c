package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestSchemaRejectsBadValues renders the chart with one bad value at a time (as a values file,
// so YAML types reach helm unchanged) and expects helm to refuse it with a message naming it.
func TestSchemaRejectsBadValues(t *testing.T) {
	cases := []struct {
		name, values string
		want         []string // substrings of helm's error
	}{
		{"unknown mode", "mounter:\n  defaultMode: foo\n", []string{"/mounter/defaultMode", "'systemd', 'pod'"}},
		{"unknown mode in use", "mounter:\n  modesInUse: [systemd, fuse]\n", []string{"/mounter/modesInUse/1"}},
		{"mode not a string", "mounter:\n  defaultMode: 1\n", []string{"/mounter/defaultMode"}},
		{"default mode not in use", "mounter:\n  defaultMode: pod\n  modesInUse: [systemd]\n", []string{`mounter.defaultMode "pod" must be one of mounter.modesInUse`}},
		{"fallback bound in minutes", "mounter:\n  modesInUse: [systemd, pod]\n  systemdFallbackAfter: 2m\n", []string{`mounter.systemdFallbackAfter "2m" must be a duration from 0s (off, as empty is) to 90s, e.g. 45s or 1m`}},
		{"fallback bound past kubelet's deadline", "mounter:\n  modesInUse: [systemd, pod]\n  systemdFallbackAfter: 91s\n", []string{`mounter.systemdFallbackAfter "91s" must be a duration from 0s`, "kubelet ends a publish after 2 minutes"}},
		{"fallback without systemd mode", "mounter:\n  defaultMode: pod\n  modesInUse: [pod]\n  systemdFallbackAfter: 30s\n", []string{`mounter.systemdFallbackAfter "30s" needs systemd in mounter.modesInUse`}},
		{"fallback without pod mode", "mounter:\n  modesInUse: [systemd]\n  systemdFallbackAfter: 30s\n", []string{`mounter.systemdFallbackAfter "30s" needs pod in mounter.modesInUse`}},
		{"region a number", "s3:\n  region: 5\n", []string{"/s3/region", "got number, want string"}},
		{"region empty", "s3:\n  region: \"\"\n", []string{"/s3/region"}},
		{"endpoint without scheme", "s3:\n  endpointUrl: s3.example.com\n", []string{"/s3/endpointUrl"}},
		{"unknown top-level key", "mountr:\n  defaultMode: pod\n", []string{"additional properties 'mountr' not allowed"}},
		{"unknown nested key", "node:\n  kubeletDir: /var/lib/kubelet\n", []string{"/node", "additional properties 'kubeletDir' not allowed"}},
		{"relative kubelet path", "node:\n  kubeletPath: var/lib/kubelet\n", []string{"/node/kubeletPath"}},
		{"mount-s3's user root", "node:\n  mountS3User: root\n", []string{"node.mountS3User root is what an empty value means", "name a dedicated system user such as s3csi-mount"}},
		{"mount-s3's user a uid", "node:\n  mountS3User: \"0\"\n", []string{`node.mountS3User "0" is not a portable user name (a uid such as 0 is not one`}},
		{"mount-s3's user not a user name", "node:\n  mountS3User: ../S3\n", []string{`node.mountS3User "../S3" is not a portable user name`, "e.g. s3csi-mount"}},
		{"log level a string", "node:\n  logLevel: high\n", []string{"/node/logLevel", "want integer"}},
		{"log level too high", "controller:\n  logLevel: 11\n", []string{"/controller/logLevel"}},
		{"bad duration", "node:\n  mountTimeout: 60\n", []string{"/node/mountTimeout"}},
		{"duration without a unit", "node:\n  mountTimeout: \"60\"\n", []string{`node.mountTimeout "60" is not a duration: write a number with a unit, e.g. 30s, 1m or 1m30s`}},
		{"provisioner timeout zero", "controller:\n  provisioner:\n    timeout: 0s\n", []string{`controller.provisioner.timeout "0s" must be more than zero`}},
		{"sidecar resource not a quantity", "sidecars:\n  csiProvisioner:\n    resources:\n      requests:\n        cpu: some\n", []string{`sidecars.csiProvisioner.resources.requests.cpu "some" is not a Kubernetes quantity: use a number with an optional suffix, e.g. 50m or 1`}},
		{"no-proxy entry with a space inside", "proxy:\n  httpsProxy: http://proxy:3128\n  noProxy: \"a b,c\"\n", []string{`proxy.noProxy entry "a b" has a space inside it`}},
		{"proxy with a tab", "proxy:\n  httpsProxy: \"http://proxy:3128\\t\"\n", []string{"proxy.httpsProxy \"http://proxy:3128\\t\" holds a control or invisible character (a tab"}},
		{"bad duration unit", "controller:\n  emptyBucketBudget: 30sec\n", []string{`controller.emptyBucketBudget "30sec" is not a duration`}},
		{"metrics not a bool", "node:\n  metrics:\n    enabled: \"yes\"\n", []string{"/node/metrics/enabled", "want boolean"}},
		{"port out of range", "controller:\n  healthProbePort: 70000\n", []string{"/controller/healthProbePort"}},
		{"image tag a number", "image:\n  tag: 1.2\n", []string{"/image/tag", "want string"}},
		{"unknown pull policy", "image:\n  pullPolicy: Sometimes\n", []string{"/image/pullPolicy"}},
		{"bad namespace name", "mountpointPod:\n  namespace: Mount_S3\n", []string{"/mountpointPod/namespace"}},
		{"tolerations not a list", "mountpointPod:\n  tolerations: all\n", []string{"/mountpointPod/tolerations"}},
		{"unknown toleration field", "node:\n  tolerations:\n    - keys: x\n", []string{"/node/tolerations/0", "'keys'"}},
		{"CA bundle not PEM", "tls:\n  caBundle: not-a-certificate\n", []string{"tls.caBundle holds no PEM certificate", "would exit on every node"}},
		{"CA bundle body not base64", "tls:\n  caBundle: \"-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----\\n\"\n", []string{"tls.caBundle certificate 1 of 1 is not a certificate"}},
		{"CA bundle twice", "tls:\n  caBundle: \"-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----\\n\"\n  existingConfigMap: ring-ca\n", []string{"tls.caBundle and tls.existingConfigMap are exclusive"}},
		{"all secrets and a list", "controller:\n  provisioner:\n    secretNamespaces: [\"*\", team-a]\n", []string{"/controller/provisioner/secretNamespaces"}},
		{"replicas zero", "controller:\n  replicas: 0\n", []string{"/controller/replicas"}},
		{"bad resource quantity", "node:\n  resources:\n    limits:\n      memory: lots\n", []string{`node.resources.limits.memory "lots" is not a Kubernetes quantity: use a number with an optional suffix, e.g. 128Mi or 1Gi`}},
		{"Mountpoint Pod memory limit not a quantity", "mountpointPod:\n  resources:\n    limits:\n      memory: lots\n", []string{`mountpointPod.resources.limits.memory "lots" is not a Kubernetes quantity`}},
		{"Mountpoint Pod CPU request negative", "mountpointPod:\n  resources:\n    requests:\n      cpu: -1\n", []string{"/mountpointPod/resources/requests/cpu"}},
		{"proxy with credentials", "proxy:\n  httpsProxy: http://user:pass@proxy:3128\n", []string{"proxy.httpsProxy must not carry credentials (user:password@)", "let the proxy authorise the nodes by address"}},
		{"proxy with a path", "proxy:\n  httpsProxy: http://proxy:3128/squid\n", []string{`proxy.httpsProxy "http://proxy:3128/squid" is not http://host:port`}},
		{"proxy without scheme", "proxy:\n  httpProxy: proxy:3128\n", []string{`proxy.httpProxy "proxy:3128" has no scheme: write it http://host:port`}},
		{"no-proxy with an empty entry", "proxy:\n  noProxy: a,,b\n", []string{`proxy.noProxy "a,,b" has an empty entry`}},
		{"no-proxy with a path", "proxy:\n  noProxy: a/b\n", []string{`proxy.noProxy entry "a/b" is not a host, domain (.example.com), IP or CIDR`}},
		{"cache size limit below 128Mi", "mountpointPod:\n  cacheSizeLimit: 64Mi\n", []string{"mountpointPod.cacheSizeLimit 64Mi is below the 128Mi", "set 128Mi or more, or null for no limit"}},
		{"Mountpoint Pod memory request above its limit", "mountpointPod:\n  resources:\n    requests:\n      memory: 2Gi\n    limits:\n      memory: 1Gi\n", []string{"mountpointPod.resources.requests.memory 2Gi is above mountpointPod.resources.limits.memory 1Gi", "lower the request or raise the limit"}},
		{"Mountpoint Pod CPU request above its limit", "mountpointPod:\n  resources:\n    requests:\n      cpu: 2\n    limits:\n      cpu: 1500m\n", []string{"mountpointPod.resources.requests.cpu 2 is above mountpointPod.resources.limits.cpu 1500m"}},
		{"Mountpoint Pod memory request zero", "mountpointPod:\n  resources:\n    requests:\n      memory: \"0\"\n", []string{"mountpointPod.resources.requests.memory 0 must be more than zero", "or null for none"}},
		{"slice cap zero", "node:\n  systemdSliceLimits:\n    memory: \"0\"\n", []string{"node.systemdSliceLimits.memory 0 must be more than zero"}},
		{"mount timeout zero", "node:\n  mountTimeout: 0s\n", []string{`node.mountTimeout "0s" must be more than zero`}},
		{"node affinity unknown key", "node:\n  affinity:\n    nodeAfinity: {}\n", []string{"node.affinity has an unknown key nodeAfinity", "use nodeAffinity, podAffinity, podAntiAffinity"}},
		{"controller affinity unknown key", "controller:\n  affinity:\n    antiAffinity: {}\n", []string{"controller.affinity has an unknown key antiAffinity"}},
		{"node SELinux unknown key", "node:\n  seLinuxOptions:\n    typ: super_t\n", []string{"node.seLinuxOptions has an unknown key typ", "use user, role, type, level"}},
		{"unknown preemption policy", "mountpointPod:\n  preemptionPolicy: Sometimes\n", []string{"/mountpointPod/preemptionPolicy"}},
		{"headroom without preemption", "mounter:\n  defaultMode: pod\nmountpointPod:\n  preemptionPolicy: Never\n  headroom:\n    enabled: true\n", []string{"mountpointPod.headroom.enabled needs mountpointPod.preemptionPolicy PreemptLowerPriority"}},
		{"headroom limits", "mountpointPod:\n  headroom:\n    resources:\n      limits:\n        memory: 1Gi\n", []string{"/mountpointPod/headroom/resources", "additional properties 'limits' not allowed"}},
		{"Mountpoint Pod user", "mountpointPod:\n  securityContext:\n    runAsUser: 0\n", []string{"/mountpointPod/securityContext", "additional properties 'runAsUser' not allowed"}},
		{"Mountpoint Pod unconfined", "mountpointPod:\n  securityContext:\n    seccompProfile:\n      type: Unconfined\n", []string{"/mountpointPod/securityContext/seccompProfile/type"}},
		{"Mountpoint Pod SELinux type", "mountpointPod:\n  securityContext:\n    seLinuxOptions:\n      type: spc_t\n", []string{"/mountpointPod/securityContext/seLinuxOptions/type"}},
		{"slice cap not a quantity", "node:\n  systemdSliceLimits:\n    memory: all\n", []string{`node.systemdSliceLimits.memory "all" is not a Kubernetes quantity: use a number with an optional suffix, e.g. 8Gi`}},
		{"slice cap unknown resource", "node:\n  systemdSliceLimits:\n    pids: 100\n", []string{"/node/systemdSliceLimits", "additional properties 'pids' not allowed"}},
		{"cache size limit not a quantity", "mountpointPod:\n  cacheSizeLimit: big\n", []string{`mountpointPod.cacheSizeLimit "big" is not a Kubernetes quantity: use a number with an optional suffix, e.g. 5Gi or 128Mi`}},
		// Helm's schema library names a wrong place for a propertyNames failure (another
		// value's path), so the key it refused is what is checked.
		{"Mountpoint Pod label of the driver", "mountpointPod:\n  labels:\n    s3.csi.scality.com/volume-name: x\n", []string{"invalid propertyName 's3.csi.scality.com/volume-name'"}},
		{"Mountpoint Pod label value not a string", "mountpointPod:\n  labels:\n    team: 5\n", []string{"/mountpointPod/labels/team"}},
		{"Mountpoint Pod annotation of the driver", "mountpointPod:\n  annotations:\n    s3.csi.scality.com/needs-unmount: \"true\"\n", []string{"invalid propertyName 's3.csi.scality.com/needs-unmount'"}},
		{"Mountpoint Pod resource unknown", "mountpointPod:\n  resources:\n    requests:\n      gpu: 1\n", []string{"/mountpointPod/resources/requests", "additional properties 'gpu' not allowed"}},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := harness.HelmTemplate(t, release, namespace, "--values", f)
			if err == nil {
				t.Fatalf("helm accepted:\n%s", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSchemaAcceptsDefaults makes sure the defaults and every testdata values file satisfy the
// schema (helm validates values.yaml merged with the user's values).
func TestSchemaAcceptsDefaults(t *testing.T) {
	if _, err := harness.HelmTemplate(t, release, namespace); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := harness.HelmTemplate(t, release, namespace, "--set", "mounter.defaultMode=pod"); err != nil {
		t.Fatalf("--set mounter.defaultMode=pod: %v", err)
	}
}
