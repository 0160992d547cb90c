package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func (e *env) expectEvent(p *corev1.Pod, reason, contains string) {
	e.t.Helper()
	harness.Eventually(e.t, 20*time.Second, func() string {
		for _, ev := range e.eventsFor(p) {
			if strings.HasPrefix(ev, reason+":") && strings.Contains(ev, contains) {
				return ""
			}
		}
		return fmt.Sprintf("no %s event mentioning %q on %s: %v", reason, contains, p.Name, e.eventsFor(p))
	})
}

func TestMisconfiguredVolumesGetEventsNotObjects(t *testing.T) {
	e := newEnv(t)
	_, noBucket := e.volume("nobucket", volumeOpts{noBucket: true})
	_, badAuth := e.volume("badauth", volumeOpts{attributes: map[string]string{"authenticationSource": "pod"}})
	e.claim("dangling", e.id+"-no-such-pv", ptr.To(storageClass)) // bound to a PV that does not exist

	w1 := e.pod("no-bucket", e.node(1), nil, noBucket)
	w2 := e.pod("bad-auth", e.node(1), nil, badAuth)
	w3 := e.pod("dangling", e.node(1), nil, "dangling")
	e.expectEvent(w1, reconciler.ReasonVolumeMisconfigured, "bucketName")
	e.expectEvent(w2, reconciler.ReasonVolumeMisconfigured, "authenticationSource")
	e.expectEvent(w3, reconciler.ReasonVolumeMisconfigured, "does not exist")
	e.expectNothingMade(time.Second, "for misconfigured volumes (partial objects)")
	if !e.ctrl.Running() {
		t.Fatal("controller crashed")
	}
}

func TestMountpointPodCreationFailureIsReported(t *testing.T) {
	e := newEnv(t, "--mountpoint-namespace=no-such-namespace")
	_, claim := e.volume("nons", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	e.expectEvent(w, reconciler.ReasonMountpointPodFailed, "no-such-namespace")
	if a := e.attachments(); len(a) != 0 {
		t.Fatalf("attachment recorded without a Mountpoint Pod: %v", a)
	}
}

func TestPodWithHundredsOfVolumes(t *testing.T) {
	e := newEnv(t)
	var claims []string
	for i := 0; i < 150; i++ {
		_, ours := e.volume(fmt.Sprintf("s3-%d", i), volumeOpts{})
		_, other := e.volume(fmt.Sprintf("nfs-%d", i), volumeOpts{driver: "nfs.csi.k8s.io"})
		claims = append(claims, ours, other)
	}
	w := e.pod("many", e.node(1), nil, claims...)
	harness.Eventually(t, 60*time.Second, func() string {
		atts := e.attachments()
		if len(atts) != 150 {
			return fmt.Sprintf("%d attachments, want 150", len(atts))
		}
		for _, a := range atts {
			if why := hasWorkloads(a, w.UID); why != "" {
				return why
			}
		}
		if n := len(e.mountpointPods()); n != 150 {
			return fmt.Sprintf("%d Mountpoint Pods, want 150", n)
		}
		return ""
	})
}

func TestNamesAtTheLengthLimits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := (e.id + "-" + strings.Repeat("n", 63))[:63]
	e.ns = ns
	ensure := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := e.c.Create(ctx, ensure); err != nil {
		t.Fatal(err)
	}
	long := func(prefix string) string { return (prefix + strings.Repeat("x", 253))[:253] }
	pvName, claim, node := long(e.id+"-pv-"), long("claim-"), long(e.id+"-node-")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:  []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:     &corev1.ObjectReference{Namespace: ns, Name: claim},
			MountOptions: []string{strings.Repeat("prefix=a", 1) + "/" + strings.Repeat("p", 900) + "/"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: strings.Repeat("h", 1024), VolumeAttributes: map[string]string{"bucketName": strings.Repeat("b", 63)},
			}},
		},
	}
	if err := e.c.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	e.claim(claim, pvName, ptr.To(""))
	w := e.pod(long("pod-"), node, ptr.To[int64](2147483647), claim)
	var atts []crdv2.MountpointS3PodAttachment
	harness.Eventually(t, 20*time.Second, func() string {
		var list crdv2.MountpointS3PodAttachmentList
		if err := e.c.List(ctx, &list); err != nil {
			return err.Error()
		}
		atts = nil
		for _, a := range list.Items {
			if a.Spec.PersistentVolumeName == pvName {
				atts = append(atts, a)
			}
		}
		if len(atts) != 1 {
			return fmt.Sprintf("%d attachments for the long PV", len(atts))
		}
		return hasWorkloads(atts[0], w.UID)
	})
	mp, err := e.mountpointPod(firstKey(atts[0].Spec.MountpointS3PodAttachments))
	if err != nil {
		t.Fatal(err)
	}
	if mp.Annotations[podcontract.AnnotationVolumeName] != pvName {
		t.Errorf("Mountpoint Pod annotation lacks the full PV name")
	}
	if _, ok := mp.Labels[podcontract.LabelVolumeName]; ok {
		t.Errorf("a 253-character PV name was put in a label (limit 63)")
	}
	if !e.ctrl.Running() {
		t.Fatal("controller crashed")
	}
}
