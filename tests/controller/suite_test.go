// Package controller tests the Pod Reconciler (the real scality-csi-controller binary, under its
// generated least-privilege RBAC) against a real kube-apiserver and etcd. The tests play the
// scheduler and kubelet: they bind pods to nodes and set pod and claim phases.
package controller

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const (
	mpNamespace   = "mount-s3"
	priorityClass = "mount-s3-node-critical"
	storageClass  = "s3-dynamic"
)

var kube *harness.Kube

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "tests/controller needs root (it shares the harness with the mount suites)")
	}
	mt := harness.NewMainTB()
	kube = harness.StartAPIServer(mt, harness.KubeOptions{})
	kube.EnsureNamespace(mt, mpNamespace)
	ctx := context.Background()
	for _, obj := range []client.Object{
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: priorityClass}, Value: 1000000000},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: "s3.csi.scality.com"},
	} {
		if err := kube.Client.Create(ctx, obj); err != nil {
			mt.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	code := m.Run()
	mt.Close()
	os.Exit(code)
}

var testSeq atomic.Int64

// env is one test's slice of the cluster: its own namespace and node names, and a controller.
type env struct {
	t    *testing.T
	c    client.Client
	ns   string
	id   string
	ctrl *harness.Controller
}

// newEnv creates a namespace for the test and starts a controller with extra flags.
func newEnv(t *testing.T, extraArgs ...string) *env {
	t.Helper()
	id := fmt.Sprintf("t%d", testSeq.Add(1))
	e := &env{t: t, c: kube.Client, ns: "ns-" + id, id: id}
	kube.EnsureNamespace(t, e.ns)
	e.ctrl = e.startController(extraArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", tail(e.ctrl.Log(), 60))
		}
	})
	return e
}

func (e *env) startController(extraArgs ...string) *harness.Controller {
	args := append([]string{"--batch-window=200ms", "--mountpoint-priority-class-name=" + priorityClass}, extraArgs...)
	return harness.StartController(e.t, kube, harness.ControllerOptions{ExtraArgs: args})
}

func (e *env) node(n int) string { return fmt.Sprintf("%s-node-%d", e.id, n) }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// volume creates a PV of this driver bound to a PVC in the test namespace and returns the
// claim name. pv names are prefixed with the test id.
type volumeOpts struct {
	mountOptions []string
	attributes   map[string]string
	driver       string
	noBucket     bool
}

func (e *env) volume(name string, o volumeOpts) (pvName, claim string) {
	e.t.Helper()
	ctx := context.Background()
	pvName, claim = e.id+"-"+name, name
	driver := o.driver
	if driver == "" {
		driver = "s3.csi.scality.com"
	}
	attrs := map[string]string{"bucketName": "bucket-" + name}
	if o.noBucket {
		delete(attrs, "bucketName")
	}
	for k, v := range o.attributes {
		attrs[k] = v
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			MountOptions:                  o.mountOptions,
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.ns, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: pvName + "-handle", VolumeAttributes: attrs,
			}},
		},
	}
	if err := e.c.Create(ctx, pv); err != nil {
		e.t.Fatalf("create PV: %v", err)
	}
	e.claim(claim, pvName, ptr.To(""))
	return pvName, claim
}

// claim creates a PVC; a non-empty volumeName makes it Bound to that PV (the test plays the PV
// controller).
func (e *env) claim(name, volumeName string, class *string) {
	e.t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: class,
			VolumeName:       volumeName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := e.c.Create(ctx, pvc); err != nil {
		e.t.Fatalf("create PVC: %v", err)
	}
	if volumeName != "" {
		e.bindClaim(name, volumeName)
	}
}

func (e *env) bindClaim(name, volumeName string) {
	e.t.Helper()
	ctx := context.Background()
	var pvc corev1.PersistentVolumeClaim
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &pvc); err != nil {
		e.t.Fatal(err)
	}
	if pvc.Spec.VolumeName != volumeName {
		pvc.Spec.VolumeName = volumeName
		if err := e.c.Update(ctx, &pvc); err != nil {
			e.t.Fatalf("bind PVC: %v", err)
		}
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := e.c.Status().Update(ctx, &pvc); err != nil {
		e.t.Fatalf("PVC status: %v", err)
	}
}

// pod creates a workload pod on node (scheduled when node != "") using the claims.
func (e *env) pod(name, node string, fsGroup *int64, claims ...string) *corev1.Pod {
	e.t.Helper()
	p := podSpec(e.ns, name, node, fsGroup, claims...)
	if err := e.c.Create(context.Background(), p); err != nil {
		e.t.Fatalf("create pod %s: %v", name, err)
	}
	return p
}

func podSpec(ns, name, node string, fsGroup *int64, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:        node,
			Containers:      []corev1.Container{{Name: "app", Image: "busybox"}},
			SecurityContext: &corev1.PodSecurityContext{FSGroup: fsGroup},
		},
	}
	for i, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{
			Name:         fmt.Sprintf("v%d", i),
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}},
		})
	}
	return p
}

func (e *env) setPhase(p *corev1.Pod, phase corev1.PodPhase) {
	e.t.Helper()
	ctx := context.Background()
	var cur corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
		e.t.Fatal(err)
	}
	cur.Status.Phase = phase
	if err := e.c.Status().Update(ctx, &cur); err != nil {
		e.t.Fatalf("set phase: %v", err)
	}
}

func (e *env) deletePod(p *corev1.Pod) {
	e.t.Helper()
	if err := e.c.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("delete pod: %v", err)
	}
}

// attachments returns the attachments of the test's nodes.
func (e *env) attachments() []crdv2.MountpointS3PodAttachment {
	e.t.Helper()
	var list crdv2.MountpointS3PodAttachmentList
	if err := e.c.List(context.Background(), &list); err != nil {
		e.t.Fatal(err)
	}
	var out []crdv2.MountpointS3PodAttachment
	for _, a := range list.Items {
		if strings.HasPrefix(a.Spec.NodeName, e.id+"-") {
			out = append(out, a)
		}
	}
	return out
}

// mountpointPods returns the Mountpoint Pods serving the test's PVs.
func (e *env) mountpointPods() []corev1.Pod {
	e.t.Helper()
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace(mpNamespace)); err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Annotations[podcontract.AnnotationVolumeName], e.id+"-") {
			out = append(out, p)
		}
	}
	return out
}

// workloadsOf renders an attachment as "mpPod: uid,uid" lines for messages and comparisons.
func workloadsOf(a crdv2.MountpointS3PodAttachment) map[string][]string {
	out := map[string][]string{}
	for mp, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			out[mp] = append(out[mp], w.WorkloadPodUID)
		}
		sort.Strings(out[mp])
	}
	return out
}

// consistently checks cond stays "" for d.
func consistently(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if why := cond(); why != "" {
			t.Fatal(why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectNothingMade fails the test when an attachment or a Mountpoint Pod exists at any check
// during d. Call it after something shows the controller has looked (an event, say).
func (e *env) expectNothingMade(d time.Duration, why string) {
	e.t.Helper()
	consistently(e.t, d, func() string {
		if a := e.attachments(); len(a) != 0 {
			return fmt.Sprintf("attachments made %s: %v", why, a)
		}
		if p := e.mountpointPods(); len(p) != 0 {
			return fmt.Sprintf("Mountpoint Pods made %s: %d", why, len(p))
		}
		return ""
	})
}

// eventsFor returns the reasons of events about a pod.
func (e *env) eventsFor(p *corev1.Pod) []string {
	e.t.Helper()
	var list corev1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(p.Namespace)); err != nil {
		e.t.Fatal(err)
	}
	var reasons []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == p.Name && ev.InvolvedObject.Kind == "Pod" {
			reasons = append(reasons, ev.Reason+": "+ev.Message)
		}
	}
	return reasons
}

func resourceQty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
