package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func (e *env) mountpointPod(name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: mpNamespace, Name: name}, &p)
	return &p, err
}

// TestWorkloadLifecycle: workloads leave one by one; the last one's departure retires the
// Mountpoint Pod and deletes the attachment; the finished Mountpoint Pod is deleted.
func TestWorkloadLifecycle(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("life", volumeOpts{})
	w1 := e.pod("w1", e.node(1), nil, claim)
	w2 := e.pod("w2", e.node(1), nil, claim)
	w3 := e.pod("w3", e.node(1), nil, claim)
	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w1.UID, w2.UID, w3.UID) })
	mp := firstKey(atts[0].Spec.MountpointS3PodAttachments)

	e.deletePod(w1) // deleted
	e.setPhase(w2, corev1.PodSucceeded)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w3.UID) })
	if p, _ := e.mountpointPod(mp); p.Annotations[podcontract.AnnotationNeedsUnmount] != "" {
		t.Fatal("Mountpoint Pod retired while a workload still uses it")
	}

	e.setPhase(w3, corev1.PodFailed) // the last workload ends
	harness.Eventually(t, 20*time.Second, func() string {
		p, err := e.mountpointPod(mp)
		if err != nil {
			return err.Error()
		}
		if p.Annotations[podcontract.AnnotationNeedsUnmount] != "true" {
			return "Mountpoint Pod not annotated needs-unmount"
		}
		return ""
	})
	e.expectAttachments(0, nil)

	// The node unmounts, the mounter exits 0: the pod is Succeeded and then deleted.
	p, _ := e.mountpointPod(mp)
	p.Status.Phase = corev1.PodSucceeded
	if err := e.c.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, func() string {
		if _, err := e.mountpointPod(mp); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("finished Mountpoint Pod not deleted: %v", err)
		}
		return ""
	})
}

// TestGracefulDeletionEndsWorkload: a pod being deleted (deletionTimestamp set, still present
// while its containers stop) no longer counts.
func TestGracefulDeletionEndsWorkload(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("graceful", volumeOpts{})
	w1 := e.pod("w1", e.node(1), nil, claim)
	w2 := e.pod("w2", e.node(1), nil, claim)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w1.UID, w2.UID) })
	if err := e.c.Delete(context.Background(), w1, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w2.UID) })
}

func TestLatePVCBinding(t *testing.T) {
	e := newEnv(t)
	e.claim("late", "", ptr.To(storageClass)) // dynamic claim, not bound yet
	w := e.pod("waiting", e.node(1), nil, "late")
	harness.Eventually(t, 20*time.Second, func() string {
		for _, ev := range e.eventsFor(w) {
			if strings.HasPrefix(ev, reconciler.ReasonVolumeNotBound) {
				return ""
			}
		}
		return fmt.Sprintf("no %s event on the workload: %v", reconciler.ReasonVolumeNotBound, e.eventsFor(w))
	})
	if a := e.attachments(); len(a) != 0 {
		t.Fatalf("attachment before the claim is bound: %v", a)
	}
	// The provisioner creates the PV and the PV controller binds the claim.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: e.id + "-late-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: *resourceQty("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: storageClass,
			ClaimRef:         &corev1.ObjectReference{Namespace: e.ns, Name: "late"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: "late-handle", VolumeAttributes: map[string]string{"bucketName": "late-bucket"},
			}},
		},
	}
	if err := e.c.Create(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	e.bindClaim("late", pv.Name)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w.UID) })
}

func TestStaleAndOrphanCleanup(t *testing.T) {
	e := newEnv(t, "--resync-interval=1s", "--orphan-grace=3s")
	pv, claim := e.volume("stale", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w.UID) })

	// A workload that vanished while nobody watched (recorded, but its pod does not exist).
	a := atts[0].DeepCopy()
	mp := firstKey(a.Spec.MountpointS3PodAttachments)
	a.Spec.MountpointS3PodAttachments[mp] = append(a.Spec.MountpointS3PodAttachments[mp], crdv2.WorkloadAttachment{WorkloadPodUID: "ghost-uid", AttachmentTime: metav1.Now()})
	if err := e.c.Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w.UID) })

	// A Mountpoint Pod no attachment references (left by an interrupted reconcile) is retired
	// once older than the grace period.
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mp-orphan-" + e.id, Namespace: mpNamespace,
			Labels:      map[string]string{podcontract.LabelComponent: podcontract.ComponentMountpoint},
			Annotations: map[string]string{podcontract.AnnotationVolumeName: pv}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mountpoint", Image: "x"}}},
	}
	if err := e.c.Create(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	harness.Eventually(t, 15*time.Second, func() string {
		p, err := e.mountpointPod(orphan.Name)
		if err != nil {
			return err.Error()
		}
		if p.Annotations[podcontract.AnnotationNeedsUnmount] != "true" {
			return "orphan not retired"
		}
		return ""
	})
	// creationTimestamp has one-second granularity, so the grace can end up to 1 s early.
	if time.Since(created) < 2*time.Second {
		t.Errorf("orphan retired after %v, before its 3 s grace period", time.Since(created))
	}
	if p, _ := e.mountpointPod(mp); p.Annotations[podcontract.AnnotationNeedsUnmount] != "" {
		t.Error("the live Mountpoint Pod was retired")
	}
}

func TestDuplicateAttachmentsAreMerged(t *testing.T) {
	e := newEnv(t)
	pv, claim := e.volume("dup", volumeOpts{})
	w1 := e.pod("w1", e.node(1), nil, claim)
	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w1.UID) })
	e.ctrl.Stop()
	// Something else (an older version, a restore) made a second attachment for the same key,
	// recording another live workload on the same Mountpoint Pod.
	w2 := e.pod("w2", e.node(1), nil, claim)
	dup := &crdv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "s3pa-"},
		Spec:       *atts[0].Spec.DeepCopy(),
	}
	mp := firstKey(dup.Spec.MountpointS3PodAttachments)
	dup.Spec.MountpointS3PodAttachments = map[string][]crdv2.WorkloadAttachment{mp: {{WorkloadPodUID: string(w2.UID), AttachmentTime: metav1.Now()}}}
	if err := e.c.Create(context.Background(), dup); err != nil {
		t.Fatal(err)
	}
	e.ctrl.Start()
	merged := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w1.UID, w2.UID) })
	if merged[0].Name != atts[0].Name {
		t.Errorf("kept %s, want the canonical %s", merged[0].Name, atts[0].Name)
	}
	_ = pv
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("metrics", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w.UID) })
	harness.Eventually(t, 20*time.Second, func() string {
		resp, err := http.Get(e.ctrl.MetricsURL)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, want := range []string{"s3csi_controller_attachments ", "s3csi_controller_attached_workloads ", `s3csi_controller_mountpoint_pods{phase="Pending"}`, "s3csi_controller_mountpoint_pods_created_total 1"} {
			if !strings.Contains(string(b), want) {
				return "metrics lack " + want
			}
		}
		return ""
	})
}
