// Package podmode runs pod mode end to end on real parts: a kube-apiserver with the real
// controller, a fake kubelet that runs the real scality-csi-mounter for each Mountpoint Pod, the
// real node plugin process in pod mode, versitygw and the mount-s3 stand-in serving real FUSE
// mounts.
package podmode

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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const mpNamespace = "mount-s3"

var kube *harness.Kube

func TestMain(m *testing.M) {
	mt := harness.NewMainTB()
	kube = harness.StartAPIServer(mt, harness.KubeOptions{})
	kube.EnsureNamespace(mt, mpNamespace)
	code := m.Run()
	mt.Close()
	os.Exit(code)
}

var seq atomic.Int64

// node is one simulated node in pod mode with its own controller, S3 server and namespace.
type node struct {
	t       *testing.T
	name    string
	ns      string
	kubelet string
	s3      *harness.S3Server
	ctrl    *harness.Controller
	mk      *harness.MountpointKubelet
	drv     *harness.Driver
}

// newNode starts the controller, the fake kubelet and the node plugin in pod mode. driverArgs
// are extra node plugin flags.
func newNode(t *testing.T, driverArgs ...string) *node {
	t.Helper()
	return newNodeWith(t, harness.S3Options{}, driverArgs...)
}

// newNodeWith also chooses the S3 server's options (TLS, ...); a TLS server's CA bundle is given
// to the node plugin.
func newNodeWith(t *testing.T, so harness.S3Options, driverArgs ...string) *node {
	t.Helper()
	harness.RequireRoot(t)
	id := fmt.Sprintf("p%d", seq.Add(1))
	n := &node{t: t, name: id + "-node", ns: "ns-" + id, s3: harness.StartS3With(t, so), kubelet: harness.NewKubeletDir(t)}
	if so.TLS {
		driverArgs = append(driverArgs, "--s3-ca-bundle="+n.s3.CABundle)
	}
	kube.EnsureNamespace(t, n.ns)
	n.ctrl = harness.StartController(t, kube, harness.ControllerOptions{ExtraArgs: []string{"--batch-window=100ms"}})
	harness.CleanupMounts(t, n.kubelet)
	n.mk = harness.StartMountpointKubelet(t, kube, n.name, n.kubelet, mpNamespace)
	n.drv = n.startDriver(driverArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s\ncontroller log:\n%s", tail(n.drv.Log(), 80), tail(n.ctrl.Log(), 30))
		}
	})
	return n
}

func (n *node) startDriver(args ...string) *harness.Driver {
	kubeconfig := kube.Kubeconfig(n.t, "system:node:"+n.name)
	kube.BindRBAC(n.t, "node-rbac.yaml", "system:node:"+n.name)
	return harness.StartDriver(n.t, harness.DriverOptions{
		KubeletDir: n.kubelet, S3: n.s3, WithCredentials: true, NodeID: n.name,
		ExtraArgs: append([]string{"--default-mounter=pod", "--kubeconfig=" + kubeconfig, "--mountpoint-namespace=" + mpNamespace}, args...),
	})
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// volume creates a PV of this driver for bucket (bound to a claim in the node's namespace) and
// returns the PV.
func (n *node) volume(name, bucket string, mode corev1.PersistentVolumeAccessMode, mountOptions ...string) *corev1.PersistentVolume {
	n.t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: n.ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:  []corev1.PersistentVolumeAccessMode{mode},
			MountOptions: mountOptions,
			ClaimRef:     &corev1.ObjectReference{Namespace: n.ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: n.ns + "-" + name + "-handle", VolumeAttributes: map[string]string{"bucketName": bucket},
			}},
		},
	}
	harness.Must(n.t, kube.Client.Create(ctx, pv))
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode}, StorageClassName: ptr.To(""), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	harness.Must(n.t, kube.Client.Create(ctx, pvc))
	pvc.Status.Phase = corev1.ClaimBound
	harness.Must(n.t, kube.Client.Status().Update(ctx, pvc))
	return pv
}

// workload creates a workload pod scheduled on the node that uses the PV's claim.
func (n *node) workload(name string, pv *corev1.PersistentVolume, fsGroup *int64) *corev1.Pod {
	n.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec: corev1.PodSpec{
			NodeName:        n.name,
			Containers:      []corev1.Container{{Name: "app", Image: "busybox"}},
			SecurityContext: &corev1.PodSecurityContext{FSGroup: fsGroup},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pv.Spec.ClaimRef.Name}}}},
		},
	}
	harness.Must(n.t, kube.Client.Create(context.Background(), p))
	return p
}

// target is kubelet's target path for the workload's volume.
func (n *node) target(w *corev1.Pod, pv *corev1.PersistentVolume) string {
	return harness.TargetPath(n.t, n.kubelet, string(w.UID), pv.Name)
}

// publishReq is what kubelet sends for the workload's volume.
func (n *node) publishReq(w *corev1.Pod, pv *corev1.PersistentVolume, readOnly bool) *csi.NodePublishVolumeRequest {
	mode := csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	if pv.Spec.AccessModes[0] == corev1.ReadOnlyMany {
		mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	}
	mount := &csi.VolumeCapability_MountVolume{MountFlags: pv.Spec.MountOptions}
	if w.Spec.SecurityContext.FSGroup != nil {
		mount.VolumeMountGroup = fmt.Sprint(*w.Spec.SecurityContext.FSGroup)
	}
	vc := map[string]string{"csi.storage.k8s.io/pod.uid": string(w.UID), "csi.storage.k8s.io/pod.namespace": w.Namespace}
	for k, v := range pv.Spec.CSI.VolumeAttributes {
		vc[k] = v
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId:         pv.Spec.CSI.VolumeHandle,
		TargetPath:       n.target(w, pv),
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: mount}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}},
		VolumeContext:    vc,
		Readonly:         readOnly,
	}
}

func (n *node) publish(w *corev1.Pod, pv *corev1.PersistentVolume, readOnly bool) string {
	n.t.Helper()
	req := n.publishReq(w, pv, readOnly)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
		n.t.Fatalf("NodePublishVolume(%s): %v", w.Name, err)
	}
	return req.TargetPath
}

func (n *node) unpublish(target string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		n.t.Fatalf("NodeUnpublishVolume(%s): %v", target, err)
	}
}

// attachments returns the attachments of the node.
func (n *node) attachments() []crdv2.MountpointS3PodAttachment {
	var list crdv2.MountpointS3PodAttachmentList
	harness.Must(n.t, kube.Client.List(context.Background(), &list))
	var out []crdv2.MountpointS3PodAttachment
	for _, a := range list.Items {
		if a.Spec.NodeName == n.name {
			out = append(out, a)
		}
	}
	return out
}

// mountpointPods returns the node's Mountpoint Pods.
func (n *node) mountpointPods() []corev1.Pod {
	var list corev1.PodList
	harness.Must(n.t, kube.Client.List(context.Background(), &list, client.InNamespace(mpNamespace)))
	var out []corev1.Pod
	for _, p := range list.Items {
		if harnessPinned(&p) == n.name {
			out = append(out, p)
		}
	}
	return out
}

func harnessPinned(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
	}
	return ""
}

func (n *node) sourceRoot() string {
	return filepath.Join(n.kubelet, "plugins", "s3.csi.scality.com", "mnt")
}
