package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// What Scality's driver 2.x leaves in the cluster for a running workload, as
// ../shared/reference/anchors.md describes it (2.2.0):
//   - §6.2-§6.3: a MountpointS3PodAttachment named s3pa-<random> (generateName) whose spec has
//     nodeName, persistentVolumeName, volumeID, mountOptions and workloadFSGroup but no
//     authenticationSource (Scality's sharing key leaves it out), labelled with the driver
//     version;
//   - §5.5: a Mountpoint Pod mp-<SHA-224(workload UID + PV name)> in the Mountpoint namespace,
//     labelled s3.csi.scality.com/{mountpoint-version,mounted-by-csi-driver-version,pod-uid,
//     volume-name}, without this driver's app.kubernetes.io/component label or annotations.
const version2x = "2.2.0"

func (e *env) mountpointPod2x(workload *corev1.Pod, pvName string) *corev1.Pod {
	e.t.Helper()
	name := podcontract.MountpointPodName(string(workload.UID), pvName)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mpNamespace, Labels: map[string]string{
			"s3.csi.scality.com/mountpoint-version": "1.19.0",
			podcontract.LabelDriverVersion:          version2x,
			podcontract.LabelWorkloadUID:            string(workload.UID),
			podcontract.LabelVolumeName:             pvName,
		}},
		Spec: corev1.PodSpec{
			NodeName:      workload.Spec.NodeName,
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers:    []corev1.Container{{Name: "mountpoint", Image: "ghcr.io/scality/mountpoint-s3-csi-driver:" + version2x}},
		},
	}
	if err := e.c.Create(context.Background(), p); err != nil {
		e.t.Fatalf("create 2.x Mountpoint Pod: %v", err)
	}
	e.setPhase(p, corev1.PodRunning)
	return p
}

func (e *env) attachment2x(pvName, node, mp string, workloads ...*corev1.Pod) string {
	e.t.Helper()
	a := &crdv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "s3pa-", Labels: map[string]string{podcontract.LabelDriverVersion: version2x}},
		Spec: crdv2.MountpointS3PodAttachmentSpec{
			NodeName: node, PersistentVolumeName: pvName, VolumeID: pvName + "-handle",
			MountpointS3PodAttachments: map[string][]crdv2.WorkloadAttachment{},
		},
	}
	for _, w := range workloads {
		a.Spec.MountpointS3PodAttachments[mp] = append(a.Spec.MountpointS3PodAttachments[mp],
			crdv2.WorkloadAttachment{WorkloadPodUID: string(w.UID), AttachmentTime: metav1.Now()})
	}
	if err := e.c.Create(context.Background(), a); err != nil {
		e.t.Fatalf("create 2.x attachment (the CRD must accept one without authenticationSource): %v", err)
	}
	return a.Name
}

// TestAttachmentsOf2xAreKeptUntilTheirWorkloadsEnd: after an upgrade from Scality's 2.x, the
// controller keeps 2.x's attachments and Mountpoint Pods for the workloads 2.x attached (the
// node plugin serves those mounts on), attaches new workloads with its own objects, retires a
// 2.x Mountpoint Pod when its last workload ends, and deletes it once it finished.
func TestAttachmentsOf2xAreKeptUntilTheirWorkloadsEnd(t *testing.T) {
	e := newEnv(t)
	pvName, claim := e.volume("from2x", volumeOpts{})
	node := e.node(1)
	// The 2.x era: 2.x's controller attached two running workloads to one Mountpoint Pod.
	e.ctrl.Stop()
	w1 := e.pod("w1", node, nil, claim)
	w2 := e.pod("w2", node, nil, claim)
	e.setPhase(w1, corev1.PodRunning)
	e.setPhase(w2, corev1.PodRunning)
	mp := e.mountpointPod2x(w1, pvName)
	name2x := e.attachment2x(pvName, node, mp.Name, w1, w2)

	// The upgrade: this controller starts and sees them (every workload event enqueues the
	// attachments recording it).
	e.ctrl.Start()
	only2x := func(want ...*corev1.Pod) string {
		atts := e.attachments()
		var got *crdv2.MountpointS3PodAttachment
		for i := range atts {
			if atts[i].Spec.AuthenticationSource == "" {
				if got != nil {
					return fmt.Sprintf("two attachments without authenticationSource: %v", atts)
				}
				got = &atts[i]
			}
		}
		if got == nil {
			return "the 2.x attachment is gone"
		}
		if got.Name != name2x {
			return fmt.Sprintf("the 2.x attachment %s was replaced by %s (a rollback to 2.x must find its own)", name2x, got.Name)
		}
		if len(got.Spec.MountpointS3PodAttachments) != 1 || got.Spec.MountpointS3PodAttachments[mp.Name] == nil {
			return fmt.Sprintf("2.x attachment %v, want its Mountpoint Pod %s alone", workloadsOf(*got), mp.Name)
		}
		uids := make([]types.UID, 0, len(want))
		for _, w := range want {
			uids = append(uids, w.UID)
		}
		return hasWorkloads(*got, uids...)
	}
	notRetired := func() string {
		cur, err := e.mountpointPod(mp.Name)
		if err != nil {
			return fmt.Sprintf("2.x Mountpoint Pod: %v", err)
		}
		if cur.Annotations[podcontract.AnnotationNeedsUnmount] != "" {
			return "2.x Mountpoint Pod retired while its workloads run"
		}
		return ""
	}
	consistently(t, 3*time.Second, func() string {
		if why := only2x(w1, w2); why != "" {
			return why
		}
		if n := len(e.attachments()); n != 1 {
			return fmt.Sprintf("%d attachments, want 2.x's alone (no new one for workloads 2.x attached)", n)
		}
		return notRetired()
	})

	// A new workload of the volume gets this driver's own attachment and Mountpoint Pod.
	w3 := e.pod("w3", node, nil, claim)
	e.expectAttachments(2, func(atts []crdv2.MountpointS3PodAttachment) string {
		for _, a := range atts {
			if a.Spec.AuthenticationSource == "driver" {
				if _, shared := a.Spec.MountpointS3PodAttachments[mp.Name]; shared {
					return "the new workload joined the 2.x Mountpoint Pod"
				}
				return hasWorkloads(a, w3.UID)
			}
		}
		return "no attachment of this driver for the new workload"
	})
	if why := only2x(w1, w2); why != "" {
		t.Fatal(why)
	}

	// 2.x's workloads end one by one: the last one retires the 2.x Mountpoint Pod.
	e.deletePod(w1)
	harness.Eventually(t, 20*time.Second, func() string { return only2x(w2) })
	if why := notRetired(); why != "" {
		t.Fatal(why)
	}
	e.deletePod(w2)
	harness.Eventually(t, 20*time.Second, func() string {
		cur, err := e.mountpointPod(mp.Name)
		if err != nil {
			return err.Error()
		}
		if cur.Annotations[podcontract.AnnotationNeedsUnmount] == "" {
			return "2.x Mountpoint Pod not retired after its last workload ended"
		}
		if why := only2x(); why != "the 2.x attachment is gone" {
			return "2.x attachment kept: " + why
		}
		return ""
	})
	// The node unmounts it, its mounter exits 0: the controller deletes the finished pod.
	e.setPhase(mp, corev1.PodSucceeded)
	harness.Eventually(t, 20*time.Second, func() string {
		if _, err := e.mountpointPod(mp.Name); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("finished 2.x Mountpoint Pod not deleted (%v)", err)
		}
		return ""
	})
}
