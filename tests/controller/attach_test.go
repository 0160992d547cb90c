package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// expectLayout waits until the test's attachments are exactly want: for each PV name, the set of
// workload UIDs sharing one Mountpoint Pod per attachment (one attachment per listed group).
func (e *env) expectAttachments(n int, check func([]crdv2.MountpointS3PodAttachment) string) []crdv2.MountpointS3PodAttachment {
	e.t.Helper()
	var atts []crdv2.MountpointS3PodAttachment
	harness.Eventually(e.t, 20*time.Second, func() string {
		atts = e.attachments()
		if len(atts) != n {
			return fmt.Sprintf("%d attachments, want %d: %v", len(atts), n, atts)
		}
		if check != nil {
			return check(atts)
		}
		return ""
	})
	return atts
}

func hasWorkloads(a crdv2.MountpointS3PodAttachment, uids ...types.UID) string {
	var got []string
	for _, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			got = append(got, w.WorkloadPodUID)
		}
	}
	for _, u := range uids {
		if !slices.Contains(got, string(u)) {
			return fmt.Sprintf("attachment %s lacks workload %s (has %v)", a.Name, u, got)
		}
	}
	if len(got) != len(uids) {
		return fmt.Sprintf("attachment %s has %v, want %d workloads", a.Name, got, len(uids))
	}
	return ""
}

func TestWorkloadGetsAttachmentAndMountpointPod(t *testing.T) {
	e := newEnv(t, `--mountpoint-tolerations=[{"key":"dedicated","operator":"Equal","value":"storage","effect":"NoSchedule"}]`,
		"--mountpoint-image-pull-secrets=registry-a, registry-b",
		`--mountpoint-labels={"team":"storage"}`, `--mountpoint-annotations={"sidecar.istio.io/inject":"false"}`)
	pv, claim := e.volume("data", volumeOpts{mountOptions: []string{"allow-delete", "uid=1000"}})
	w := e.pod("w1", e.node(1), ptr.To[int64](2000), claim)

	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], w.UID) })
	a := atts[0]
	key := podcontract.Key{NodeName: e.node(1), PVName: pv, VolumeID: pv + "-handle", MountOptions: "allow-delete,uid=1000", FSGroup: "2000", AuthSource: "driver"}
	if a.Name != podcontract.AttachmentName(key) {
		t.Errorf("attachment name %s, want the deterministic %s", a.Name, podcontract.AttachmentName(key))
	}
	if a.Spec.NodeName != key.NodeName || a.Spec.PersistentVolumeName != pv || a.Spec.VolumeID != key.VolumeID ||
		a.Spec.MountOptions != key.MountOptions || a.Spec.WorkloadFSGroup != "2000" || a.Spec.AuthenticationSource != "driver" {
		t.Errorf("attachment spec = %+v", a.Spec)
	}
	mpName := podcontract.MountpointPodName(string(w.UID), pv)
	if _, ok := a.Spec.MountpointS3PodAttachments[mpName]; !ok {
		t.Fatalf("attachment does not name the Mountpoint Pod %s: %v", mpName, workloadsOf(a))
	}

	var mp corev1.Pod
	harness.Eventually(t, 20*time.Second, func() string {
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: mpNamespace, Name: mpName}, &mp); err != nil {
			return err.Error()
		}
		return ""
	})
	c := mp.Spec.Containers[0]
	sc := c.SecurityContext
	psc := mp.Spec.SecurityContext
	checks := map[string]bool{
		"runs scality-csi-mounter from the driver image": c.Image == "registry.example/scality-s3-csi-driver:test" && slices.Equal(c.Command, []string{"/bin/scality-csi-mounter"}),
		"non-root":                                    psc != nil && ptr.Deref(psc.RunAsNonRoot, false) && ptr.Deref(psc.RunAsUser, 0) != 0,
		"no privilege escalation":                     sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"all capabilities dropped":                    sc != nil && sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
		"seccomp RuntimeDefault":                      psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"not privileged":                              sc.Privileged == nil || !*sc.Privileged,
		"memory-backed comm at /comm":                 len(mp.Spec.Volumes) == 2 && mp.Spec.Volumes[0].Name == "comm" && mp.Spec.Volumes[0].EmptyDir != nil && mp.Spec.Volumes[0].EmptyDir.Medium == corev1.StorageMediumMemory && len(c.VolumeMounts) == 2 && c.VolumeMounts[0].MountPath == "/comm",
		"read-only root filesystem, /tmp an emptyDir": sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem && mp.Spec.Volumes[1].Name == "tmp" && mp.Spec.Volumes[1].EmptyDir != nil && c.VolumeMounts[1].Name == "tmp" && c.VolumeMounts[1].MountPath == "/tmp",
		"pinned to the workload node":                 mp.Spec.Affinity != nil && mp.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] == e.node(1),
		"priority class from flags":                   mp.Spec.PriorityClassName == priorityClass,
		"tolerations from flags, never tolerate-everything": slices.ContainsFunc(mp.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "dedicated" && t.Value == "storage" }) &&
			!slices.ContainsFunc(mp.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "" && t.Operator == corev1.TolerationOpExists }),
		"no API token":                  mp.Spec.AutomountServiceAccountToken != nil && !*mp.Spec.AutomountServiceAccountToken,
		"image pull secrets from flags": slices.Equal(mp.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry-a"}, {Name: "registry-b"}}),
		"restarts on failure":           mp.Spec.RestartPolicy == corev1.RestartPolicyOnFailure,
		"version label":                 mp.Labels[podcontract.LabelDriverVersion] != "",
		"PV label and annotation":       mp.Labels[podcontract.LabelVolumeName] == pv && mp.Annotations[podcontract.AnnotationVolumeName] == pv,
		"workload label":                mp.Labels[podcontract.LabelWorkloadUID] == string(w.UID),
		"labels and annotations from flags, beside the driver's": mp.Labels["team"] == "storage" && mp.Annotations["sidecar.istio.io/inject"] == "false" &&
			mp.Labels[podcontract.LabelComponent] == podcontract.ComponentMountpoint && mp.Annotations[podcontract.AnnotationVolumeID] == key.VolumeID,
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("Mountpoint Pod: not %s:\n%+v", what, mp.Spec)
		}
	}
}

func TestSharingRules(t *testing.T) {
	e := newEnv(t)
	pvA, claimA := e.volume("a", volumeOpts{})
	_, claimOpts := e.volume("a-ro", volumeOpts{mountOptions: []string{"read-only"}})
	_, claimB := e.volume("b", volumeOpts{})
	_, claimSecret := e.volume("sec", volumeOpts{attributes: map[string]string{"authenticationSource": "secret"}})

	w1 := e.pod("w1", e.node(1), nil, claimA)
	w2 := e.pod("w2", e.node(1), nil, claimA)                 // same key: shares
	w3 := e.pod("w3", e.node(2), nil, claimA)                 // other node
	w4 := e.pod("w4", e.node(1), ptr.To[int64](3000), claimA) // other fsGroup
	w5 := e.pod("w5", e.node(1), nil, claimOpts)              // other mount options
	w6 := e.pod("w6", e.node(1), nil, claimB)                 // other PV
	w7 := e.pod("w7", e.node(1), nil, claimSecret)            // secret authentication
	w8 := e.pod("w8", e.node(1), nil, claimA, claimB, claimA) // two volumes, one listed twice

	atts := e.expectAttachments(6, func(atts []crdv2.MountpointS3PodAttachment) string {
		total := 0
		for _, a := range atts {
			for _, ws := range a.Spec.MountpointS3PodAttachments {
				total += len(ws)
			}
		}
		if total != 9 {
			return fmt.Sprintf("%d workload entries, want 9", total)
		}
		return ""
	})
	byKey := map[string]crdv2.MountpointS3PodAttachment{}
	for _, a := range atts {
		byKey[fmt.Sprintf("%s|%s|%s|%s|%s", a.Spec.NodeName, a.Spec.PersistentVolumeName, a.Spec.MountOptions, a.Spec.WorkloadFSGroup, a.Spec.AuthenticationSource)] = a
		if len(a.Spec.MountpointS3PodAttachments) != 1 {
			t.Errorf("attachment %s has %d Mountpoint Pods, want 1", a.Name, len(a.Spec.MountpointS3PodAttachments))
		}
	}
	shared := byKey[e.node(1)+"|"+pvA+"||"+"|driver"]
	if why := hasWorkloads(shared, w1.UID, w2.UID, w8.UID); why != "" {
		t.Error(why)
	}
	for _, w := range []*corev1.Pod{w3, w4, w5, w6, w7} {
		found := 0
		for _, a := range atts {
			if hasWorkloads(a, w.UID) == "" {
				found++
			}
		}
		if w != w6 && found != 1 {
			t.Errorf("workload %s is alone in %d attachments, want 1", w.Name, found)
		}
	}
	if n := len(e.mountpointPods()); n != 6 {
		t.Errorf("%d Mountpoint Pods, want 6 (one per attachment)", n)
	}
	if a := byKey[e.node(1)+"|"+e.id+"-sec|||secret"]; a.Name == "" {
		t.Errorf("secret-authenticated volume has no attachment with authenticationSource secret: %v", byKey)
	}
}

func TestIgnoredWorkloads(t *testing.T) {
	e := newEnv(t)
	_, otherDriver := e.volume("ebs", volumeOpts{driver: "ebs.csi.aws.com"})
	_, ours := e.volume("ours", volumeOpts{})
	e.pod("other-driver", e.node(1), nil, otherDriver)
	e.pod("no-claims", e.node(1), nil)
	unscheduled := e.pod("unscheduled", "", nil, ours)
	e.expectNothingMade(2*time.Second, "for ignored workloads")
	// Once scheduled (the test plays the scheduler), the pod is served.
	binding := &corev1.Binding{ObjectMeta: unscheduled.ObjectMeta, Target: corev1.ObjectReference{Kind: "Node", Name: e.node(1)}}
	binding.ResourceVersion = ""
	if err := e.c.SubResource("binding").Create(context.Background(), unscheduled, binding); err != nil {
		t.Fatalf("bind pod: %v", err)
	}
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], unscheduled.UID) })
}

func TestRunningWorkloadWithoutAttachmentIsLeftAlone(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("legacy", volumeOpts{})
	e.ctrl.Stop()
	// A workload already Running when the controller looks: its volume was mounted by something
	// else (systemd mode).
	running := e.pod("running", e.node(1), nil, claim)
	e.setPhase(running, corev1.PodRunning)
	e.ctrl.Start()
	consistently(t, 2*time.Second, func() string {
		if a := e.attachments(); len(a) != 0 {
			return fmt.Sprintf("attachment created for a Running workload: %v", workloadsOf(a[0]))
		}
		return ""
	})
	// A new workload on the same volume and node is served; the running one stays out.
	fresh := e.pod("fresh", e.node(1), nil, claim)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], fresh.UID) })
}

func TestNoSharingWithRetiredOrForeignMountpointPods(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("share", volumeOpts{})
	ctx := context.Background()
	first := e.pod("first", e.node(1), nil, claim)
	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], first.UID) })
	mpFirst := firstKey(atts[0].Spec.MountpointS3PodAttachments)

	// An operator stops new workloads from joining: the next workload gets its own pod.
	patchPod(t, e, mpFirst, `{"metadata":{"annotations":{"`+podcontract.AnnotationNoNewWorkload+`":"true"}}}`)
	second := e.pod("second", e.node(1), nil, claim)
	atts = e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string {
		if n := len(a[0].Spec.MountpointS3PodAttachments); n != 2 {
			return fmt.Sprintf("%d Mountpoint Pods, want 2", n)
		}
		return ""
	})
	var mpSecond string
	for mp, ws := range atts[0].Spec.MountpointS3PodAttachments {
		if ws[0].WorkloadPodUID == string(second.UID) {
			mpSecond = mp
		}
	}
	if mpSecond == "" || mpSecond == mpFirst {
		t.Fatalf("second workload joined %q, want a new Mountpoint Pod", mpSecond)
	}
	// A pod made by another driver version is not shared either.
	patchPod(t, e, mpSecond, `{"metadata":{"labels":{"`+podcontract.LabelDriverVersion+`":"v0.0.1-old"}}}`)
	third := e.pod("third", e.node(1), nil, claim)
	e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string {
		if n := len(a[0].Spec.MountpointS3PodAttachments); n != 3 {
			return fmt.Sprintf("%d Mountpoint Pods, want 3 (third must not join a foreign-version pod)", n)
		}
		return hasWorkloads(a[0], first.UID, second.UID, third.UID)
	})
	_ = ctx
}

func firstKey[V any](m map[string]V) string {
	for k := range m {
		return k
	}
	return ""
}

func patchPod(t *testing.T, e *env, name, patch string) {
	t.Helper()
	p := &corev1.Pod{}
	p.Name, p.Namespace = name, mpNamespace
	if err := e.c.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patch %s: %v", name, err)
	}
}

// TestGenericEphemeralVolume: a workload whose volume is a generic ephemeral volume (its claim
// is <pod>-<volume>, created by Kubernetes' ephemeral volume controller, played here) gets an
// attachment and a Mountpoint Pod like one naming its claim.
func TestGenericEphemeralVolume(t *testing.T) {
	e := newEnv(t)
	pv, _ := e.volume("weph-scratch", volumeOpts{})
	p := podSpec(e.ns, "weph", e.node(1), nil)
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceQty("1Gi")}},
		}},
	}}}}
	if err := e.c.Create(context.Background(), p); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	atts := e.expectAttachments(1, func(a []crdv2.MountpointS3PodAttachment) string { return hasWorkloads(a[0], p.UID) })
	if atts[0].Spec.PersistentVolumeName != pv {
		t.Errorf("attachment for PV %s, want %s", atts[0].Spec.PersistentVolumeName, pv)
	}
	mpName := podcontract.MountpointPodName(string(p.UID), pv)
	harness.Eventually(t, 20*time.Second, func() string {
		var mp corev1.Pod
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: mpNamespace, Name: mpName}, &mp); err != nil {
			return err.Error()
		}
		return ""
	})
	e.deletePod(p)
	e.expectAttachments(0, nil)
}

// TestMountpointPodResources: the Mountpoint Pod's container gets the resources of the
// controller's flags, a volume's attributes override them, and a volume whose overrides are
// wrong gets an Event and no Mountpoint Pod (the controller keeps running).
func TestMountpointPodResources(t *testing.T) {
	e := newEnv(t, "--mountpoint-cpu-request=50m", "--mountpoint-memory-request=128Mi", "--mountpoint-cache-size-limit=1Gi")
	_, plain := e.volume("plain", volumeOpts{})
	_, sized := e.volume("sized", volumeOpts{attributes: map[string]string{"mountpointMemoryRequest": "256Mi", "mountpointMemoryLimit": "1Gi"}})
	_, bad := e.volume("bad", volumeOpts{attributes: map[string]string{"mountpointMemoryLimit": "64Mi"}}) // below the 128Mi default request
	wPlain := e.pod("plain", e.node(1), nil, plain)
	wSized := e.pod("sized", e.node(1), nil, sized)
	wBad := e.pod("bad", e.node(1), nil, bad)
	e.expectEvent(wBad, reconciler.ReasonVolumeMisconfigured, "memory request 128Mi is above its limit 64Mi")

	resourcesOf := func(w *corev1.Pod) corev1.ResourceRequirements {
		var res corev1.ResourceRequirements
		harness.Eventually(t, 20*time.Second, func() string {
			for _, mp := range e.mountpointPods() {
				if mp.Labels[podcontract.LabelWorkloadUID] == string(w.UID) {
					res = mp.Spec.Containers[0].Resources
					// The cache volume is bounded and mount-s3's cache kept below it.
					if l := mp.Spec.Volumes[1].EmptyDir.SizeLimit; mp.Spec.Volumes[1].Name != "tmp" || l == nil || l.String() != "1Gi" {
						t.Errorf("Mountpoint Pod %s: /tmp volume %+v, want an emptyDir of at most 1Gi", mp.Name, mp.Spec.Volumes[1])
					}
					if args := mp.Spec.Containers[0].Args; !slices.Equal(args, []string{"--max-cache-size-mib=922"}) {
						t.Errorf("Mountpoint Pod %s: mounter args %q, want --max-cache-size-mib=922 (1Gi less a tenth)", mp.Name, args)
					}
					return ""
				}
			}
			return "no Mountpoint Pod for " + w.Name
		})
		return res
	}
	q := func(l corev1.ResourceList, n corev1.ResourceName) string {
		v, ok := l[n]
		if !ok {
			return "none"
		}
		return v.String()
	}
	r := resourcesOf(wPlain)
	if got := fmt.Sprintf("%s %s %s %s", q(r.Requests, "cpu"), q(r.Requests, "memory"), q(r.Limits, "cpu"), q(r.Limits, "memory")); got != "50m 128Mi none none" {
		t.Errorf("plain volume's Mountpoint Pod: requests/limits cpu, memory = %s, want the flags' 50m 128Mi and no limit", got)
	}
	r = resourcesOf(wSized)
	if got := fmt.Sprintf("%s %s %s %s", q(r.Requests, "cpu"), q(r.Requests, "memory"), q(r.Limits, "cpu"), q(r.Limits, "memory")); got != "50m 256Mi none 1Gi" {
		t.Errorf("sized volume's Mountpoint Pod: requests/limits cpu, memory = %s, want 50m 256Mi none 1Gi", got)
	}
	for _, mp := range e.mountpointPods() {
		if mp.Labels[podcontract.LabelWorkloadUID] == string(wBad.UID) {
			t.Errorf("a Mountpoint Pod was made for the volume with a wrong override: %s", mp.Name)
		}
	}
	if !e.ctrl.Running() {
		t.Fatal("controller crashed")
	}
}

// TestUnschedulableMountpointPodIsReported: when the scheduler cannot place a Mountpoint Pod,
// each workload waiting for it gets a Warning Event naming the scheduler's reason (its owner
// may not read the Mountpoint Pods' namespace). There is no scheduler here: the test writes the
// condition the scheduler would.
func TestUnschedulableMountpointPodIsReported(t *testing.T) {
	e := newEnv(t)
	_, claim := e.volume("big", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	mp := e.mountpointPodOf(w)
	e.refuseScheduling(&mp)
	e.expectEvent(w, reconciler.ReasonUnschedulable, "cannot be scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient memory.")

	// The workload goes: the Mountpoint Pod, which never ran, is deleted, not left Pending.
	e.deletePod(w)
	harness.Eventually(t, 20*time.Second, func() string {
		var p corev1.Pod
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(&mp), &p); err == nil {
			return fmt.Sprintf("Mountpoint Pod %s still there (annotations %v)", p.Name, p.Annotations)
		}
		return ""
	})
}

// mountpointPodOf waits for the Mountpoint Pod the controller creates for workload w.
func (e *env) mountpointPodOf(w *corev1.Pod) corev1.Pod {
	e.t.Helper()
	var mp corev1.Pod
	harness.Eventually(e.t, 20*time.Second, func() string {
		for _, p := range e.mountpointPods() {
			if p.Labels[podcontract.LabelWorkloadUID] == string(w.UID) {
				mp = p
				return ""
			}
		}
		return "no Mountpoint Pod for " + w.Name + " yet"
	})
	return mp
}

// refuseScheduling sets the condition the scheduler sets on a pod it cannot place.
func (e *env) refuseScheduling(mp *corev1.Pod) {
	e.t.Helper()
	mp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient memory.", LastTransitionTime: metav1.Now()}}
	harness.Must(e.t, e.c.Status().Update(context.Background(), mp))
}

// TestRunningWorkloadLeavesUnscheduledMountpointPod: a workload that runs while its Mountpoint
// Pod was never scheduled had its volume mounted another way (its node's fallback to systemd
// mode): it is detached, and the Mountpoint Pod, left without workloads and never run, is
// deleted. A running workload of a scheduled Mountpoint Pod stays attached.
func TestRunningWorkloadLeavesUnscheduledMountpointPod(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, claim := e.volume("fallback", volumeOpts{})
	_, claim2 := e.volume("placed", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	placed := e.pod("placed", e.node(1), nil, claim2)
	mp := e.mountpointPodOf(w)
	mp2 := e.mountpointPodOf(placed)
	e.refuseScheduling(&mp)
	e.expectEvent(w, reconciler.ReasonUnschedulable, "cannot be scheduled")
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: mp2.Name, Namespace: mp2.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: e.node(1)}}
	harness.Must(t, e.c.SubResource("binding").Create(ctx, &mp2, binding))

	e.setPhase(w, corev1.PodRunning)
	e.setPhase(placed, corev1.PodRunning)
	harness.Eventually(t, 20*time.Second, func() string {
		var p corev1.Pod
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(&mp), &p); err == nil {
			return fmt.Sprintf("unscheduled Mountpoint Pod %s still there (annotations %v)", p.Name, p.Annotations)
		}
		for _, a := range e.attachments() {
			if a.Spec.MountpointS3PodAttachments[mp.Name] != nil {
				return fmt.Sprintf("attachment %s still names %s: %v", a.Name, mp.Name, workloadsOf(a))
			}
		}
		return ""
	})
	consistently(t, 2*time.Second, func() string {
		for _, a := range e.attachments() {
			if ws := a.Spec.MountpointS3PodAttachments[mp2.Name]; len(ws) == 1 && ws[0].WorkloadPodUID == string(placed.UID) {
				return ""
			}
		}
		return fmt.Sprintf("the running workload of the scheduled Mountpoint Pod %s was detached: %v", mp2.Name, e.attachments())
	})
}

// TestMountpointPodSecurityContext: --mountpoint-security-context reaches the Mountpoint Pods,
// which the API server admits, and the driver's own settings stay.
func TestMountpointPodSecurityContext(t *testing.T) {
	e := newEnv(t, `--mountpoint-security-context={"seLinuxOptions":{"type":"container_t","level":"s0:c1,c2"},"seccompProfile":{"type":"Localhost","localhostProfile":"profiles/mount-s3.json"},"supplementalGroups":[2000]}`)
	_, claim := e.volume("confined", volumeOpts{})
	w := e.pod("w", e.node(1), nil, claim)
	mp := e.mountpointPodOf(w)
	psc := mp.Spec.SecurityContext
	if psc.SELinuxOptions == nil || psc.SELinuxOptions.Level != "s0:c1,c2" || psc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost ||
		!slices.Equal(psc.SupplementalGroups, []int64{2000}) {
		t.Errorf("Mountpoint Pod security context %+v", psc)
	}
	if psc.RunAsUser == nil || *psc.RunAsUser != podcontract.MountpointUID || psc.FSGroup == nil || *psc.FSGroup != podcontract.MountpointUID {
		t.Errorf("the driver's user and fsGroup changed: %+v", psc)
	}
	if c := mp.Spec.Containers[0].SecurityContext; c.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || !*c.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v", c)
	}
}
