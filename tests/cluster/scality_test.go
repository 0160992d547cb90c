package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/pkg/legacy"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
	"github.com/s3csi/s3-csi-driver/tests/scality"
)

// caConfigMap is 2.2.0's tls.caCertConfigMap in the scenario over it, and ringCA its data: a
// CA certificate made for the suite (the rig's S3 endpoint is plain HTTP; the CA is what the
// objects and the Mountpoint Pods carry, not what a connection checks).
const caConfigMap = "ring-ca"

var ringCA = sync.OnceValue(func() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "RING CA of the upgrade scenarios"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
})

// scalityValues are the values a typical user of the release has (tests/scality.UserValues:
// the rig's S3 endpoint and region, the suite's credentials Secret) and, since there is no
// image of Scality's driver here, node selectors no node has for its DaemonSet and controller
// (the stand-ins play them); with 2.2.0, its Helm-managed CA.
func scalityValues(r scality.Release) map[string]any {
	none := map[string]any{"nodeSelector": map[string]any{"s3csi.test/scality-pods": "none"}}
	v := scality.Merge(scality.UserValues(r, rig.S3Endpoint(), "us-east-1", credentialsSc), map[string]any{"node": none})
	if r.Controller() {
		v = scality.Merge(v, map[string]any{"controller": none})
	}
	if r.TLS() {
		v = scality.Merge(v, map[string]any{"tls": map[string]any{"caCertConfigMap": caConfigMap, "caCertData": ringCA()}})
	}
	return v
}

// ourValuesFor are the user's values translated as docs/upgrade.md says (endpoint, region,
// credentials Secret; 2.2.0's CA as tls.caBundle and tls.configMapName), no mode (the chart
// keeps what the release ran), and the rig's image and systemd socket. Over 1.2.0 the user moves
// to pod mode in the same upgrade (both modes in use, pod by default); over 2.x, headroom on.
func ourValuesFor(r scality.Release) map[string]any {
	v := map[string]any{
		"s3":    map[string]any{"endpointUrl": rig.S3Endpoint(), "region": "us-east-1", "credentials": map[string]any{"secretName": credentialsSc}},
		"image": map[string]any{"repository": rig.DriverRepository, "tag": rig.DriverTag},
		"node":  map[string]any{"systemdSocket": rig.SystemdSocket()},
	}
	if r == scality.R120 {
		v["mounter"] = map[string]any{"defaultMode": "pod", "modesInUse": []any{"systemd", "pod"}}
	}
	if r.PodMode() {
		v["mountpointPod"] = map[string]any{"headroom": map[string]any{"enabled": true, "resources": map[string]any{"requests": map[string]any{"cpu": "1m", "memory": "8Mi"}}}}
	}
	if r.TLS() {
		v["tls"] = map[string]any{"caBundle": ringCA(), "configMapName": caConfigMap}
	}
	return v
}

// newMode is the mode a new mount takes on the node after the upgrade.
func newMode(r scality.Release) string {
	if r.PodMode() || r == scality.R120 {
		return "pod"
	}
	return "systemd"
}

func valuesYAML(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	harness.Must(t, err)
	return string(b)
}

func valuesFile(t *testing.T, v map[string]any) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	harness.Must(t, os.WriteFile(f, []byte(valuesYAML(t, v)), 0o600))
	return f
}

// toScalityEra takes the node back to before this driver: the chart uninstalled with what it
// keeps (the Mountpoint namespace, the CRD), the mode label off, and the release of Scality's
// chart installed under the suite's release name, as a user of it has it.
func toScalityEra(t *testing.T, r scality.Release) {
	t.Helper()
	if _, err := helm(t, "status", release, "-n", releaseNS); err == nil {
		mustRun(t)(helm(t, "uninstall", release, "-n", releaseNS, "--wait"))
	}
	waitCSINode(t, false)
	mustRun(t)(kubectl(t, "delete", "namespace", mpNamespace, "--ignore-not-found", "--wait", "--timeout=2m"))
	mustRun(t)(kubectl(t, "delete", "crd", "mountpoints3podattachments.s3.csi.scality.com", "--ignore-not-found", "--wait"))
	mustRun(t)(kubectl(t, "label", "node", rig.NodeName, "s3.csi.scality.com/mounter-"))
	mustRun(t)(kubectl(t, "annotate", "node", rig.NodeName, "s3.csi.scality.com/effective-mounter-"))
	chart, err := scality.Chart(t.TempDir(), r)
	harness.Must(t, err)
	mustRun(t)(helm(t, "install", release, chart, "-n", releaseNS, "-f", valuesFile(t, scalityValues(r))))
}

// scalityWriters are the workloads of a scenario: two writers on one volume, mounted by the
// release's node plugin (for 2.x through one shared Mountpoint Pod).
type scalityWriters struct {
	ns, bucket string
	pv         *corev1.PersistentVolume
	pods       []*corev1.Pod
	mp         string   // 2.x: the Mountpoint Pod
	units      []string // 1.x: the units
	credFiles  map[string]uint64
}

func startScalityWriters(t *testing.T, r scality.Release) *scalityWriters {
	t.Helper()
	ctx := context.Background()
	w := &scalityWriters{ns: newNamespace(t, "from-"+strings.ReplaceAll(string(r), ".", "")), bucket: "from-" + strings.ReplaceAll(string(r), ".", "") + "-" + suffix()}
	env.s3.CreateBucket(t, w.bucket)
	var opts volumeOpts
	if !r.ForcePathStyle() {
		// 1.0.0 adds no --force-path-style: its users set it for a RING endpoint.
		opts.mountOptions = []string{"force-path-style"}
	}
	if r.PodMode() && !r.DriverCredentialFilesReadable() {
		// 2.0.0's Mountpoint Pods cannot read the driver's credential files: its working
		// mounts have a Secret of their own, with keys it accepts.
		key, secret := "r200"+suffix(), "s200"+suffix()+suffix()+"abcdefXYZ"
		if !r.SecretKeysAccepted(key, secret) {
			t.Fatalf("keys %s/%s not accepted by %s", key, secret, r)
		}
		env.s3.CreateUser(t, key, secret, "admin")
		harness.Must(t, env.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "ring-keys"},
			StringData: map[string]string{"access_key_id": key, "secret_access_key": secret}}))
		opts.attributes = map[string]string{"authenticationSource": "secret"}
		opts.secretRef = &corev1.SecretReference{Namespace: w.ns, Name: "ring-keys"}
	}
	claim := staticVolume(t, w.ns, "data", w.bucket, opts)
	var pvc corev1.PersistentVolumeClaim
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: claim}, &pvc))
	w.pv = &corev1.PersistentVolume{}
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, w.pv))
	for _, name := range []string{"a", "b"} {
		p := workloadSpec(w.ns, name, claim, podOpts{command: writerScript(name)})
		p.Labels["drain"] = "workload"
		harness.Must(t, env.c.Create(ctx, p))
		w.pods = append(w.pods, p)
	}
	if r.PodMode() {
		ca := ""
		if r.TLS() {
			ca = caConfigMap
		}
		w.mp = controller2x(t, r, w.pv, ca, w.pods...)
	}
	waitRunning(t, 3*time.Minute, w.pods...)
	w.expectWriting(t, "in the release's era")
	if !r.PodMode() {
		for _, p := range w.pods {
			target := targetOf(t, p, "data")
			unit := unitAt(t, target)
			if unit == "" {
				t.Fatalf("no 1.x unit mounts %s", target)
			}
			w.units = append(w.units, unit)
		}
		w.credFiles = map[string]uint64{}
		for _, f := range legacyCredentialFiles() {
			w.credFiles[f] = inodeOf(t, f)
		}
		if len(w.credFiles) != 2 {
			t.Fatalf("%d 1.x credential files, want 2", len(w.credFiles))
		}
	} else if !isMountS3(filepath.Join(pluginDir(), "mnt", w.mp)) {
		t.Fatalf("the 2.x node plugin did not mount the source of %s", w.mp)
	}
	return w
}

func legacyCredentialFiles() []string {
	m, _ := filepath.Glob(filepath.Join(pluginDir(), "*-s3-csi-credentials"))
	return m
}

// unitAt is the 1.x unit whose mount-s3 serves target (its ExecStart ends with the target).
func unitAt(t *testing.T, target string) string {
	t.Helper()
	out, err := rig.Systemctl("list-units", "--all", "--plain", "--no-legend", "mount-s3-*")
	harness.Must(t, err)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !legacy.IsUnit(f[0]) {
			continue
		}
		exec, _ := rig.Systemctl("show", "-p", "ExecStart", "--value", f[0])
		if strings.Contains(exec, " "+target+" ") {
			return f[0]
		}
	}
	return ""
}

// expectWriting checks the writers write on: each pod Running without a restart, with more
// files in the bucket within 15 s than before.
func (w *scalityWriters) expectWriting(t *testing.T, when string) {
	t.Helper()
	count := func(name string) int {
		n := 0
		for _, k := range env.s3.ListKeys(t, w.bucket) {
			if strings.HasPrefix(k, name+"-") {
				n++
			}
		}
		return n
	}
	for _, p := range w.pods {
		var cur corev1.Pod
		harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
		if cur.Status.Phase != corev1.PodRunning || containerRestarts(t, p) != 0 {
			t.Errorf("%s: writer %s is %s with %d restarts", when, p.Name, cur.Status.Phase, containerRestarts(t, p))
		}
		before := count(p.Name)
		waitFor(t, 15*time.Second, fmt.Sprintf("%s: writer %s to write on (%d files)", when, p.Name, before), func() string {
			if count(p.Name) <= before {
				return "no new file"
			}
			return ""
		})
	}
}

// expectKept checks that what served the writers' mounts before the upgrade serves them still:
// 1.x's units active on the targets, alone; 2.x's Mountpoint Pod, Running, never restarted,
// and its attachment.
func (w *scalityWriters) expectKept(t *testing.T, r scality.Release, when string) {
	t.Helper()
	w.expectWriting(t, when)
	s := currentState(t)
	t.Logf("%s %s: %s", r, when, s) // the closing notes' table: what serves the mounts at each step
	if !r.PodMode() {
		for i, p := range w.pods {
			target := targetOf(t, p, "data")
			if got := unitAt(t, target); got != w.units[i] {
				t.Errorf("%s: %s is served by unit %q, want 1.x's %s", when, target, got, w.units[i])
			}
			if out, _ := rig.Systemctl("is-active", w.units[i]); strings.TrimSpace(out) != "active" {
				t.Errorf("%s: 1.x unit %s is %q", when, w.units[i], strings.TrimSpace(out))
			}
			if n := len(mountsAt(t, target)); n != 1 {
				t.Errorf("%s: %s holds %d mounts, want 1.x's alone", when, target, n)
			}
		}
		if len(s.mpPods) != 0 || len(s.attachments) != 0 {
			t.Errorf("%s: state made for workloads 1.x mounted: %s", when, s)
		}
		return
	}
	if !slices.Equal(s.mpPods, []string{w.mp}) || len(s.attachments) != 1 {
		t.Errorf("%s: %s, want the 2.x Mountpoint Pod and attachment alone", when, s)
	}
	var mp corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: mpNamespace, Name: w.mp}, &mp))
	if mp.Status.Phase != corev1.PodRunning || containerRestarts(t, &mp) != 0 {
		t.Errorf("%s: the 2.x Mountpoint Pod is %s with %d restarts", when, mp.Status.Phase, containerRestarts(t, &mp))
	}
	if r.TLS() {
		// The pod's init container reads the CA ConfigMap whenever the pod starts again (a node
		// reboot): it must still be there, with 2.2.0's data, and kubelet must not fail to
		// refresh the pod's volume of it.
		var cm corev1.ConfigMap
		if err := env.c.Get(context.Background(), client.ObjectKey{Namespace: mpNamespace, Name: caConfigMap}, &cm); err != nil || strings.TrimSpace(cm.Data["ca-bundle.crt"]) != ringCA() {
			t.Errorf("%s: the CA ConfigMap 2.2.0's Mountpoint Pods read: %v %v", when, err, cm.Data)
		}
		for _, e := range eventsOn(t, mpNamespace, w.mp) {
			if e.Reason == "FailedMount" {
				t.Errorf("%s: kubelet on the 2.x Mountpoint Pod: %s %s", when, e.Reason, e.Message)
			}
		}
	}
}

// expectAdopted waits for kubelet's republish (requiresRepublish, every sync period) to reach
// this driver's node plugin: 1.x's credential files rewritten where 1.x's mount-s3 reads them,
// 2.x's targets recorded as this driver's.
func (w *scalityWriters) expectAdopted(t *testing.T, r scality.Release) {
	t.Helper()
	if !r.PodMode() {
		waitFor(t, 2*time.Minute, "kubelet's republish of the 1.x volumes", func() string {
			for f, ino := range w.credFiles {
				if now := inodeOf(t, f); now == ino {
					return f + " not rewritten yet"
				}
			}
			return ""
		})
		for f := range w.credFiles {
			w.credFiles[f] = inodeOf(t, f)
		}
		return
	}
	records := filepath.Join(pluginDir(), "pod", "targets")
	waitFor(t, 2*time.Minute, "kubelet's republish of the 2.x volumes", func() string {
		if m, _ := filepath.Glob(filepath.Join(records, "*.json")); len(m) != len(w.pods) {
			return fmt.Sprintf("%d target records, want %d", len(m), len(w.pods))
		}
		return ""
	})
}

// expectScalitySelectors checks the node DaemonSet and, when there is one (this chart's
// always; Scality's from 1.2.0), the controller Deployment have the selectors of Scality's
// release (which never change).
func expectScalitySelectors(t *testing.T, controller bool) {
	t.Helper()
	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-node"}, &ds))
	selectors := map[string]map[string]string{"node DaemonSet": ds.Spec.Selector.MatchLabels}
	if controller {
		harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-controller"}, &dep))
		selectors["controller Deployment"] = dep.Spec.Selector.MatchLabels
	}
	for what, got := range selectors {
		if got["app.kubernetes.io/name"] != scality.ChartName || got["app.kubernetes.io/instance"] != release || got["app"] == "" || len(got) != 3 {
			t.Errorf("%s selector %v, want Scality's (app, app.kubernetes.io/name, app.kubernetes.io/instance)", what, got)
		}
	}
}

func helmRevisions(t *testing.T) int {
	t.Helper()
	out := mustRun(t)(helm(t, "history", release, "-n", releaseNS, "-o", "json"))
	var h []map[string]any
	harness.Must(t, yaml.Unmarshal([]byte(out), &h))
	return len(h)
}

// upgradeArgs is docs/upgrade.md's command: --take-ownership over 2.x.
func scalityUpgradeArgs(r scality.Release, extra ...string) []string {
	args := []string{"upgrade", release, harness.ChartDir(), "-n", releaseNS}
	if r.PodMode() {
		args = append(args, "--take-ownership")
	}
	return append(args, extra...)
}

// testUpgradeFromScality takes a node of one of Scality's releases over with two writers
// running on it, by every path users take, in turn on the same writers: helm upgrade
// --reuse-values (refused, nothing changes), helm upgrade -f values.yaml as docs/upgrade.md
// says, helm rollback to the release, and the GitOps take-over (offline render, server-side
// apply) followed by helm taking the objects back. Through all of it the writers never fail a
// write and keep the mounts the release made (1.x's units, 2.x's Mountpoint Pod), the node
// keeps the mode the release ran without a label (pod over 2.x), and at the end every file they
// reported is in the bucket; over 2.1.1 the writers leave by a drain, the 2.x Mountpoint Pod's
// eviction refused until they have. Nothing is left after, and a new pod mounts in the node's
// mode.
func testUpgradeFromScality(t *testing.T, r scality.Release) {
	expectClean(t)
	toScalityEra(t, r)
	var stop func()
	if r.PodMode() {
		stop = startDriver2x(t, r).stop
	} else {
		stop = startDriver1x(t, r).stop
	}
	w := startScalityWriters(t, r)
	// docs/upgrade.md's values.yaml: the translated values; the GitOps one adds the values an
	// offline render needs.
	dir, gitopsDir := t.TempDir(), t.TempDir()
	harness.Must(t, os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(valuesYAML(t, ourValuesFor(r))), 0o600))
	harness.Must(t, os.WriteFile(filepath.Join(gitopsDir, "values.yaml"), []byte(valuesYAML(t, scality.Merge(ourValuesFor(r), offlineValues(r)))), 0o600))

	// --reuse-values and --reset-then-reuse-values: refused at render with what to do instead;
	// nothing changes.
	revs := helmRevisions(t)
	if out, err := helm(t, scalityUpgradeArgs(r, "--reuse-values")...); err == nil || !strings.Contains(out, "helm upgrade --reuse-values replaces a chart's defaults") {
		t.Errorf("helm upgrade --reuse-values: %v\n%s\nwant the refusal naming the command to use", err, out)
	}
	if out, err := helm(t, scalityUpgradeArgs(r, "--reset-then-reuse-values")...); err == nil || !strings.Contains(out, " of Scality's ") || !strings.Contains(out, "(docs/upgrade.md)") {
		t.Errorf("helm upgrade --reset-then-reuse-values: %v\n%s\nwant the refusal of the release's values", err, out)
	}
	if n := helmRevisions(t); n != revs {
		t.Errorf("the refused upgrades made revision %d", n)
	}
	w.expectKept(t, r, "after --reuse-values")

	// helm upgrade -f values.yaml, in one command (docs/upgrade.md's block).
	stop()
	runDocSteps(t, map[bool]string{false: "upgrade-1x", true: "upgrade-2x"}[r.PodMode()], dir, "")
	waitRollout(t)
	waitNodeMode(t, newMode(r))
	expectScalitySelectors(t, true)
	w.expectAdopted(t, r)
	w.expectKept(t, r, "after helm upgrade")

	// helm rollback to the release: its node plugin serves the same mounts again.
	runDocSteps(t, "rollback", dir, "1")
	waitCSINode(t, false)
	expectScalitySelectors(t, r.Controller())
	if r.PodMode() {
		stop = startDriver2x(t, r).stop
	} else {
		stop = startDriver1x(t, r).stop
	}
	w.expectKept(t, r, "after helm rollback")

	// GitOps: the chart rendered offline and applied server-side, as docs/upgrade.md#gitops, then
	// what the release made and this chart does not is removed.
	stop()
	runDocSteps(t, "gitops", gitopsDir, "")
	if _, err := helm(t, "status", release, "-n", releaseNS); err == nil {
		t.Error("Helm still has a record of the release after the GitOps take-over")
	}
	waitRollout(t)
	runDocSteps(t, "gitops-leftovers-1x", gitopsDir, "")
	if r.PodMode() {
		runDocSteps(t, "gitops-leftovers-2x", gitopsDir, "")
	}
	expectNoLeftovers(t, r)
	waitNodeMode(t, newMode(r))
	expectScalitySelectors(t, true)
	w.expectAdopted(t, r)
	w.expectKept(t, r, "after the GitOps take-over")
	// ... and back to Helm, in one command.
	runDocSteps(t, "back-to-helm", dir, "")
	waitRollout(t)
	w.expectKept(t, r, "after helm install --take-ownership")

	// The writers leave; every file they reported is in the bucket.
	if r == scality.R211 {
		drainWriters(t, w.bucket, w.pods, w.mp, mountpointPodsSelector)
	} else {
		for _, p := range w.pods {
			n := stopWriter(t, p)
			checkWriter(t, w.bucket, p.Name, n)
			t.Logf("%s: writer %s wrote %d files through every path, each checked in the bucket", r, p.Name, n)
		}
	}
	if f := legacyCredentialFiles(); len(f) != 0 {
		t.Errorf("1.x credential files left: %v", f)
	}
	expectClean(t)

	// A new pod of the volume mounts in the node's mode and reads what they wrote: once for each
	// way the node came by its mode (systemd kept over 1.x, pod asked for over 1.2.0, pod kept
	// over 2.x without a label); the others' modes are the annotation checked above.
	if r != scality.R111 && r != scality.R120 && r != scality.R220 {
		return
	}
	claim := "data"
	p := workload(t, w.ns, "new", claim, podOpts{})
	waitRunning(t, 2*time.Minute, p)
	s := currentState(t)
	switch newMode(r) {
	case "systemd":
		if len(s.units) != 1 || legacy.IsUnit(s.units[0]) || len(s.mpPods) != 0 {
			t.Errorf("a new pod on a systemd-mode node: %s", s)
		}
	case "pod":
		if len(s.units) != 0 || len(s.mpPods) != 1 || s.mpPods[0] == w.mp {
			t.Errorf("a new pod on a pod-mode node: %s", s)
		}
	}
	if out := mustRun(t)(execIn(t, p, "cat /data/a-1")); !strings.Contains(out, "a-000001") {
		t.Errorf("the new pod reads %q", out)
	}
	deletePods(t, p)
	expectClean(t)
}

// mountpointPodsSelector selects every Mountpoint Pod, this driver's and 2.x's (the label both
// carry).
const mountpointPodsSelector = podcontract.LabelDriverVersion

// offlineValues are the values docs/upgrade.md#gitops has a GitOps user add, those a cluster
// would tell: the mode the release ran, Secrets of any namespace as Scality allowed.
func offlineValues(r scality.Release) map[string]any {
	mode := "systemd"
	if r.PodMode() || r == scality.R120 {
		mode = "pod"
	}
	return map[string]any{
		"mounter":    map[string]any{"defaultMode": mode},
		"node":       map[string]any{"publishSecretScope": "any"},
		"controller": map[string]any{"provisioner": map[string]any{"secretNamespaces": []any{"*"}}},
	}
}

// expectNoLeftovers checks nothing of Scality's release is left that this chart does not own:
// its service accounts, RBAC and (2.x) priority classes.
func expectNoLeftovers(t *testing.T, r scality.Release) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: scality.NodeServiceAccount}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: scality.CtrlServiceAccount}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: scality.NodeClusterRole}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scality.NodeBinding}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: scality.CtrlClusterRole}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scality.CtrlBinding}},
	}
	if r.PodMode() {
		objs = append(objs, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "mount-s3-critical"}},
			&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "mount-s3-preempting"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: mpNamespace, Name: "s3-csi-driver-node-mountpoint-pod-namespace-role"}})
	}
	for _, o := range objs {
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("Scality's %T %s left after docs/upgrade.md's clean-up (%v)", o, o.GetName(), err)
		}
	}
}

// drainWriters drains the node of the writers and of Mountpoint Pods (selected by
// mpSelector), as kubectl drain would: the Mountpoint Pod's eviction is refused (the chart's
// PodDisruptionBudget) while its workloads use it, the writers never see their mount die
// (every file they report is in the bucket), and it ends only after they left. (Two concurrent
// drains by pod selector, so that the rig's only node keeps the driver's controller, which a
// real cluster would run on another node.)
func drainWriters(t *testing.T, bucket string, writers []*corev1.Pod, mp, mpSelector string) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() { _, _ = kubectl(t, "uncordon", rig.NodeName) })
	logCtx, stopLogs := context.WithTimeout(ctx, 4*time.Minute)
	defer stopLogs()
	logs := map[string]chan string{}
	for _, w := range writers {
		ch := make(chan string, 1)
		logs[w.Name] = ch
		go func() {
			out, _ := kubectlCmd(logCtx, "-n", w.Namespace, "logs", "-f", w.Name).CombinedOutput()
			ch <- string(out)
		}()
	}
	var workloadsGone, mpEnded time.Time
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			now := time.Now()
			gone := 0
			for _, w := range writers {
				if err := env.c.Get(watchCtx, client.ObjectKeyFromObject(w), &corev1.Pod{}); apierrors.IsNotFound(err) {
					gone++
				}
			}
			if workloadsGone.IsZero() && gone == len(writers) {
				workloadsGone = now
			}
			var p corev1.Pod
			err := env.c.Get(watchCtx, client.ObjectKey{Namespace: mpNamespace, Name: mp}, &p)
			if mpEnded.IsZero() && (apierrors.IsNotFound(err) || err == nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)) {
				mpEnded = now
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	drain := func(selector string) chan error {
		done := make(chan error, 1)
		go func() {
			out, err := kubectlCmd(ctx, "drain", rig.NodeName, "--pod-selector="+selector, "--ignore-daemonsets", "--delete-emptydir-data",
				"--force", "--grace-period=10", "--timeout=3m").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v\n%s", err, out)
			}
			done <- err
		}()
		return done
	}
	mpDrain := drain(mpSelector)
	time.Sleep(5 * time.Second)
	var p corev1.Pod
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: mpNamespace, Name: mp}, &p))
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("the Mountpoint Pod %s was evicted while its workloads run (phase %s, deleting %v)", mp, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	wlDrain := drain("drain=workload")
	for what, ch := range map[string]chan error{"workload drain": wlDrain, "Mountpoint Pod drain": mpDrain} {
		if err := <-ch; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	stopWatch()
	<-watched
	if workloadsGone.IsZero() || mpEnded.IsZero() || mpEnded.Before(workloadsGone) {
		t.Errorf("the Mountpoint Pod ended at %v, the workloads left at %v: the Mountpoint Pod must outlive them", mpEnded, workloadsGone)
	}
	for _, w := range writers {
		out := <-logs[w.Name]
		i := strings.LastIndex(out, "wrote=")
		if strings.Contains(out, "failed") || i < 0 {
			t.Errorf("writer %s log: %s", w.Name, out)
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(out[i+len("wrote="):]))
		harness.Must(t, err)
		checkWriter(t, bucket, w.Name, n)
		t.Logf("writer %s wrote %d files through the drain", w.Name, n)
	}
	mustRun(t)(kubectl(t, "uncordon", rig.NodeName))
}

// waitCSINode waits until kubelet lists (or no longer lists) the driver on the node.
func waitCSINode(t *testing.T, listed bool) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("kubelet to list the driver: %v", listed), func() string {
		out, _ := kubectl(t, "get", "csinode", rig.NodeName, "-o", "jsonpath={.spec.drivers[*].name}")
		if strings.Contains(out, driverName) != listed {
			return "drivers " + out
		}
		return ""
	})
}

// targetOf is kubelet's target path of a pod's volume: <kubelet>/pods/<uid>/volumes/
// kubernetes.io~csi/<pv>/mount.
func targetOf(t *testing.T, p *corev1.Pod, claim string) string {
	t.Helper()
	var cur corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	var pvc corev1.PersistentVolumeClaim
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: claim}, &pvc))
	return filepath.Join(rig.KubeletDir, "pods", string(cur.UID), "volumes", "kubernetes.io~csi", pvc.Spec.VolumeName, "mount")
}

// mountsAt lists the file system types mounted at path.
func mountsAt(t *testing.T, path string) []string {
	t.Helper()
	entries, err := mounttable.Table{}.List()
	harness.Must(t, err)
	var out []string
	for _, e := range entries {
		if e.MountPoint == path {
			out = append(out, e.FsType)
		}
	}
	return out
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// waitNodeMode waits until the node plugin reports the node's mode (its annotation).
func waitNodeMode(t *testing.T, mode string) {
	t.Helper()
	waitFor(t, time.Minute, "the node plugin to report mode "+mode, func() string {
		if got := nodeObj(t).Annotations["s3.csi.scality.com/effective-mounter"]; got != mode {
			return "effective mode " + got
		}
		return ""
	})
}

// waitFor is harness.Eventually with a description.
func waitFor(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	harness.Eventually(t, d, func() string {
		if why := cond(); why != "" {
			return what + ": " + why
		}
		return ""
	})
}
