package reconciler

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

func att(rv string, uids ...string) *crdv2.MountpointS3PodAttachment {
	a := &crdv2.MountpointS3PodAttachment{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv}}
	for _, u := range uids {
		if a.Spec.MountpointS3PodAttachments == nil {
			a.Spec.MountpointS3PodAttachments = map[string][]crdv2.WorkloadAttachment{}
		}
		a.Spec.MountpointS3PodAttachments["mp"] = append(a.Spec.MountpointS3PodAttachments["mp"], crdv2.WorkloadAttachment{WorkloadPodUID: u})
	}
	return a
}

func TestOverlayResolve(t *testing.T) {
	k := podcontract.Key{NodeName: "n"}
	var o overlay
	if got := o.resolve(k, att("1", "x")); got.ResourceVersion != "1" {
		t.Fatal("nothing remembered: the cache is the truth")
	}
	// Create not seen yet by the cache.
	o.remember(k, att("5", "a"), "")
	if got := o.resolve(k, nil); got == nil || got.ResourceVersion != "5" {
		t.Fatalf("unseen create: got %v", got)
	}
	// Cache caught up: memory dropped.
	if got := o.resolve(k, att("5", "a")); got.ResourceVersion != "5" {
		t.Fatal("caught-up cache not used")
	}
	if _, ok := o.written[k]; ok {
		t.Fatal("memory kept after the cache caught up")
	}
	// Update not seen yet: the cache still shows the replaced version.
	o.remember(k, att("7", "a", "b"), "5")
	if got := o.resolve(k, att("5", "a")); got.ResourceVersion != "7" || len(got.Spec.MountpointS3PodAttachments["mp"]) != 2 {
		t.Fatalf("stale cache not overlaid: %v", got)
	}
	// Someone else wrote something newer: the cache wins.
	if got := o.resolve(k, att("9", "z")); got.ResourceVersion != "9" {
		t.Fatal("newer foreign write hidden by the overlay")
	}
	// Delete not seen yet.
	o.remember(k, nil, "9")
	if got := o.resolve(k, att("9", "z")); got != nil {
		t.Fatal("deleted object resurrected from a stale cache")
	}
	if got := o.resolve(k, nil); got != nil {
		t.Fatal("delete seen: want nil")
	}
	// Returned objects are copies: callers may mutate them.
	o.remember(k, att("11", "q"), "")
	got := o.resolve(k, nil)
	got.Spec.MountpointS3PodAttachments["mp"] = nil
	if again := o.resolve(k, nil); len(again.Spec.MountpointS3PodAttachments["mp"]) != 1 {
		t.Fatal("overlay shares memory with its callers")
	}
}

func TestPodExpectations(t *testing.T) {
	var e podExpectations
	e.add("mp-1")
	if !e.pending("mp-1") || e.pending("mp-2") {
		t.Fatal("pending")
	}
	e.observed("mp-1")
	if e.pending("mp-1") {
		t.Fatal("observed pod still pending")
	}
	e.add("mp-3")
	e.created["mp-3"] = time.Now().Add(-2 * expectationTTL)
	if e.pending("mp-3") {
		t.Fatal("expired expectation still pending")
	}
}

func TestClaimNames(t *testing.T) {
	pvc := func(name, claim string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	eph := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		pvc("a", "shared"), eph("cache"), pvc("b", "shared"), {Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}, eph("data"),
	}}}
	if got, want := claimNames(pod), []string{"shared", "web-0-cache", "web-0-data"}; !slices.Equal(got, want) {
		t.Errorf("claimNames = %v, want %v", got, want)
	}
	if got := claimNames(&corev1.Pod{}); got != nil {
		t.Errorf("claimNames of a pod without volumes = %v", got)
	}
}

func TestWorkloadKeepsWhatTheReconcilerReads(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "9", CreationTimestamp: now, DeletionTimestamp: &now,
			Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{Name: "rs"}}, Finalizers: []string{"f"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec: corev1.PodSpec{
			NodeName:        "node",
			SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](5), RunAsUser: ptr.To[int64](7)},
			Containers:      []corev1.Container{{Name: "c", Image: "big", Env: []corev1.EnvVar{{Name: "A", Value: "B"}}}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c1"}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
					Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("s3")}}}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: "Ready"}}},
	}
	out, err := toWorkload(pod)
	if err != nil {
		t.Fatal(err)
	}
	w := out.(*workload)
	if w.Name != "p" || w.Namespace != "ns" || w.UID != "u" || w.ResourceVersion != "9" || w.CreationTimestamp.IsZero() || !w.Deleting ||
		w.NodeName != "node" || w.FSGroup != "5" || w.Phase != corev1.PodRunning || !w.ended() {
		t.Errorf("lost a field the reconciler reads: %+v", w)
	}
	if !slices.Equal(w.Claims, []string{"c1", "p-scratch"}) {
		t.Errorf("claims = %v, want c1 and the ephemeral volume's p-scratch", w.Claims)
	}
	if key, err := toolscache.MetaNamespaceKeyFunc(w); err != nil || key != "ns/p" {
		t.Errorf("the informer's key of a workload = %q, %v; want ns/p", key, err)
	}
	// An object the informer already transformed (inside a DeletedFinalStateUnknown) passes as is.
	if again, _ := toWorkload(w); again != w {
		t.Error("toWorkload changed a workload")
	}
	if ref := w.ref(); ref.Kind != "Pod" || ref.Name != "p" || ref.Namespace != "ns" || ref.UID != "u" {
		t.Errorf("event reference = %+v", ref)
	}
	c := w.DeepCopyObject().(*workload)
	c.Claims[0], c.Deleting = "x", false
	if w.Claims[0] != "c1" || !w.Deleting {
		t.Error("DeepCopyObject shares state with its source")
	}
}
