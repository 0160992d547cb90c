// Package mixed tests the per-node mount mode on real parts: a kube-apiserver with the real
// controller, simulated nodes each with its own node plugin process (distinct node ids and
// kubelet dirs), a systemd user manager, a fake kubelet for Mountpoint Pods, versitygw and the
// mount-s3 stand-in. It covers mixed clusters, in-place migration systemd→pod and back, restarts
// in the middle of a migration, and label flips during bursts.
package mixed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const mpNamespace = "mount-s3"

var (
	kube *harness.Kube
	seq  atomic.Int64
)

func TestMain(m *testing.M) {
	mt := harness.NewMainTB()
	kube = harness.StartAPIServer(mt, harness.KubeOptions{})
	kube.EnsureNamespace(mt, mpNamespace)
	code := m.Run()
	mt.Close()
	os.Exit(code)
}

// cluster is one test's world: a namespace, an S3 server, the controller (cluster default pod).
type cluster struct {
	t    *testing.T
	id   string
	ns   string
	s3   *harness.S3Server
	ctrl *harness.Controller
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	harness.RequireRoot(t)
	id := fmt.Sprintf("m%d", seq.Add(1))
	c := &cluster{t: t, id: id, ns: "ns-" + id, s3: harness.StartS3(t)}
	kube.EnsureNamespace(t, c.ns)
	c.ctrl = harness.StartController(t, kube, harness.ControllerOptions{ExtraArgs: []string{"--batch-window=100ms"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", tail(c.ctrl.Log(), 30))
		}
	})
	return c
}

// node is a simulated node: a Node object with an optional mode label, its kubelet dir, a
// systemd manager (for systemd mode), a fake kubelet (for pod mode) and a node plugin.
type node struct {
	c       *cluster
	name    string
	kubelet string
	sd      *harness.Systemd
	mk      *harness.MountpointKubelet
	drv     *harness.Driver
	// metricsURL is the node plugin's Prometheus endpoint (nodeOpts.metrics).
	metricsURL string
}

type nodeOpts struct {
	label       string   // value of s3.csi.scality.com/mounter ("" = no label)
	noPodAccess bool     // no RBAC for the Mountpoint namespace (a bare-metal node)
	noKubelet   bool     // no fake kubelet (no Mountpoint Pods can run)
	metrics     bool     // serve the node plugin's metrics (node.metricsURL)
	podMounter  string   // value of --pod-mounter ("" = the default, true)
	args        []string // more node plugin flags
}

func (c *cluster) node(suffix string, o nodeOpts) *node {
	c.t.Helper()
	n := &node{c: c, name: c.id + "-" + suffix, kubelet: harness.NewKubeletDir(c.t)}
	labels := map[string]string{}
	if o.label != "" {
		labels[mountmode.Label] = o.label
	}
	harness.Must(c.t, kube.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}))
	n.sd = harness.StartSystemd(c.t, n.kubelet)
	harness.CleanupMounts(c.t, n.kubelet)
	if !o.noKubelet {
		n.mk = harness.StartMountpointKubelet(c.t, kube, n.name, n.kubelet, mpNamespace)
	}
	user := "system:node:" + n.name
	kube.BindRBAC(c.t, "node-rbac.yaml", user)
	if o.noPodAccess {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scality-s3-csi-node-" + user, Namespace: mpNamespace}}
		harness.Must(c.t, kube.Client.Delete(context.Background(), rb))
	}
	args := []string{"--default-mounter=pod", "--kubeconfig=" + kube.Kubeconfig(c.t, user), "--mountpoint-namespace=" + mpNamespace, "--api-timeout=3s", "--pod-sweep-interval=2s"}
	if o.podMounter != "" {
		args = append(args, "--pod-mounter="+o.podMounter)
	}
	args = append(args, o.args...)
	if o.metrics {
		port, err := harness.FreePort()
		harness.Must(c.t, err)
		args = append(args, fmt.Sprintf("--metrics-address=127.0.0.1:%d", port))
		n.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	}
	n.drv = harness.StartDriver(c.t, harness.DriverOptions{
		KubeletDir: n.kubelet, SystemdSocket: n.sd.Socket, S3: c.s3, WithCredentials: true, NodeID: n.name, ExtraArgs: args,
	})
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("driver %s log:\n%s", n.name, tail(n.drv.Log(), 60))
		}
	})
	return n
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// relabel sets the node's mode label ("" removes it) and waits until the node plugin reports
// the effective mode (annotation) it should now use.
func (n *node) relabel(value string, effective mountmode.Mode) {
	n.c.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, mountmode.Label, value)
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, mountmode.Label)
	}
	harness.Must(n.c.t, kube.Client.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, client.RawPatch(types.MergePatchType, []byte(patch))))
	n.waitEffective(effective)
}

func (n *node) waitEffective(m mountmode.Mode) {
	n.c.t.Helper()
	harness.Eventually(n.c.t, 10*time.Second, func() string {
		var node corev1.Node
		harness.Must(n.c.t, kube.Client.Get(context.Background(), client.ObjectKey{Name: n.name}, &node))
		if got := node.Annotations[nodemode.AnnotationEffectiveMode]; got != string(m) {
			return fmt.Sprintf("node %s effective mode %q, want %q", n.name, got, m)
		}
		return ""
	})
}

// volume creates a PV of this driver for bucket, bound to a claim in the cluster's namespace.
func (c *cluster) volume(name, bucket string) *corev1.PersistentVolume {
	c.t.Helper()
	return c.volumeWith(name, bucket, nil)
}

// volumeWith is volume with change applied to the PV before it is created.
func (c *cluster) volumeWith(name, bucket string, change func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	c.t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: c.ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:  []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:     &corev1.ObjectReference{Namespace: c.ns, Name: name},
			MountOptions: []string{"allow-delete"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: c.ns + "-" + name + "-handle", VolumeAttributes: map[string]string{"bucketName": bucket},
			}},
		},
	}
	if change != nil {
		change(pv)
	}
	harness.Must(c.t, kube.Client.Create(ctx, pv))
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: pv.Spec.AccessModes, StorageClassName: ptr.To(""), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	harness.Must(c.t, kube.Client.Create(ctx, pvc))
	pvc.Status.Phase = corev1.ClaimBound
	harness.Must(c.t, kube.Client.Status().Update(ctx, pvc))
	return pv
}

// workload creates a pod on the node using the PV's claim.
func (n *node) workload(name string, pv *corev1.PersistentVolume) *corev1.Pod {
	n.c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.c.ns},
		Spec: corev1.PodSpec{
			NodeName:   n.name,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pv.Spec.ClaimRef.Name}}}},
		},
	}
	harness.Must(n.c.t, kube.Client.Create(context.Background(), p))
	return p
}

// running marks a workload Running, as kubelet does once its volumes are mounted.
func setPhase(t *testing.T, p *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	var cur corev1.Pod
	harness.Must(t, kube.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	cur.Status.Phase = phase
	harness.Must(t, kube.Client.Status().Update(context.Background(), &cur))
}

func (n *node) publishReq(w *corev1.Pod, pv *corev1.PersistentVolume, secret string) *csi.NodePublishVolumeRequest {
	vc := map[string]string{"bucketName": pv.Spec.CSI.VolumeAttributes["bucketName"], "csi.storage.k8s.io/pod.uid": string(w.UID)}
	req := &csi.NodePublishVolumeRequest{
		VolumeId:   pv.Spec.CSI.VolumeHandle,
		TargetPath: harness.TargetPath(n.c.t, n.kubelet, string(w.UID), pv.Name),
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: pv.Spec.MountOptions}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: vc,
	}
	if secret != "" { // per-volume credentials: the root keys, with a marker session-less secret
		vc["authenticationSource"] = "secret"
		req.Secrets = map[string]string{"access_key_id": n.c.s3.AccessKey, "secret_access_key": secret}
	}
	return req
}

func (n *node) publish(w *corev1.Pod, pv *corev1.PersistentVolume) string {
	n.c.t.Helper()
	req := n.publishReq(w, pv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
		n.c.t.Fatalf("NodePublishVolume(%s on %s): %v", w.Name, n.name, err)
	}
	return req.TargetPath
}

func (n *node) unpublish(target string) {
	n.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		n.c.t.Fatalf("NodeUnpublishVolume(%s): %v", target, err)
	}
}

// modeOf tells how the node mounted target: "systemd" (a unit runs for it), "pod" (a bind of a
// shared mount), "" (nothing).
func (n *node) modeOf(target string) mountmode.Mode {
	r := mounter.NewRouter(nil, nil, nil, nil, n.sourceRoot())
	m, mounted, err := r.Classify(target)
	if err != nil || !mounted {
		return ""
	}
	return m
}

func (n *node) sourceRoot() string {
	return filepath.Join(n.kubelet, "plugins", "s3.csi.scality.com", "mnt")
}

// unitOf returns the systemd unit running mount-s3 for target (or "").
func (n *node) unitOf(target string) string {
	u := systemd.MountUnitName(target)
	for _, name := range n.sd.Units(u) {
		if name == u {
			return u
		}
	}
	return ""
}

// mountpointPods returns the Mountpoint Pods pinned to the node.
func (n *node) mountpointPods() []corev1.Pod {
	var list corev1.PodList
	harness.Must(n.c.t, kube.Client.List(context.Background(), &list, client.InNamespace(mpNamespace)))
	var out []corev1.Pod
	for _, p := range list.Items {
		a := p.Spec.Affinity
		if p.Spec.NodeName == n.name || a != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] == n.name {
			out = append(out, p)
		}
	}
	return out
}

func (n *node) attachments() []crdv2.MountpointS3PodAttachment {
	var list crdv2.MountpointS3PodAttachmentList
	harness.Must(n.c.t, kube.Client.List(context.Background(), &list))
	var out []crdv2.MountpointS3PodAttachment
	for _, a := range list.Items {
		if a.Spec.NodeName == n.name {
			out = append(out, a)
		}
	}
	return out
}

func attachedUIDs(atts []crdv2.MountpointS3PodAttachment) []string {
	var out []string
	for _, a := range atts {
		for _, ws := range a.Spec.MountpointS3PodAttachments {
			for _, w := range ws {
				out = append(out, w.WorkloadPodUID)
			}
		}
	}
	return out
}

// waitRetired waits until the node has no Mountpoint Pod, no attachment and no shared mount.
func (n *node) waitRetired() {
	n.c.t.Helper()
	harness.Eventually(n.c.t, 40*time.Second, func() string {
		if m := harness.MountsBelow(n.sourceRoot()); len(m) > 0 {
			return fmt.Sprintf("shared mounts left: %v", m)
		}
		if p := n.mountpointPods(); len(p) > 0 {
			return fmt.Sprintf("%d Mountpoint Pods left (%s %v)", len(p), p[0].Status.Phase, p[0].Annotations[podcontract.AnnotationNeedsUnmount])
		}
		if a := n.attachments(); len(a) > 0 {
			return fmt.Sprintf("%d attachments left", len(a))
		}
		return ""
	})
}

func deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	harness.Must(t, kube.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)))
}
