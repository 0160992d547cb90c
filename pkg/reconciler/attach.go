package reconciler

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// plan is the attachment content being computed: Mountpoint Pod name → workloads.
type plan map[string][]crdv2.WorkloadAttachment

// reconcileKey brings one key's attachment and Mountpoint Pods in line with its workloads:
//  1. drop workloads that ended or no longer belong to the key;
//  2. drop Mountpoint Pods that vanished or finished (their waiting workloads are re-placed),
//     and running workloads from Mountpoint Pods never scheduled (their node fell back to
//     systemd mode);
//  3. retire Mountpoint Pods left without workloads (annotation needs-unmount);
//  4. place new workloads on a shareable Mountpoint Pod, creating one when none is;
//  5. write the attachment once (create, update or delete), merging duplicates into it.
func (r *Reconciler) reconcileKey(ctx context.Context, key podcontract.Key) (reconcile.Result, error) {
	logger := log.FromContext(ctx).WithValues("node", key.NodeName, "pv", key.PVName)
	cur, dups, err := r.attachments(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	desired, err := r.desiredWorkloads(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}

	p := plan{}
	for _, a := range append(slices.Clone(dups), cur) {
		if a == nil {
			continue
		}
		for mp, ws := range a.Spec.MountpointS3PodAttachments {
			p[mp] = append(p[mp], ws...)
		}
	}
	attached := map[string]bool{}
	for mp, ws := range p {
		p[mp] = slices.DeleteFunc(ws, func(w crdv2.WorkloadAttachment) bool {
			return desired[w.WorkloadPodUID] == nil || attached[w.WorkloadPodUID]
		})
		for _, w := range p[mp] {
			attached[w.WorkloadPodUID] = true
		}
	}

	// Mountpoint Pods: gone or finished ones are dropped; empty ones retired.
	pods := map[string]*corev1.Pod{}
	for _, mp := range slices.Sorted(maps.Keys(p)) {
		pod, ok, err := r.mountpointPod(ctx, mp)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			logger.Info("Mountpoint Pod gone or finished; its workloads are re-placed if still waiting", "mountpointPod", mp, "workloads", len(p[mp]))
			for _, w := range p[mp] {
				delete(attached, w.WorkloadPodUID)
			}
			delete(p, mp)
			continue
		}
		pods[mp] = pod
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			// Never placed, yet workloads attached to it run: their node mounted the volume
			// another way (its fallback to systemd mode) and no longer waits for this pod.
			before := len(p[mp])
			p[mp] = slices.DeleteFunc(p[mp], func(w crdv2.WorkloadAttachment) bool {
				return desired[w.WorkloadPodUID].Phase == corev1.PodRunning
			})
			if n := before - len(p[mp]); n > 0 {
				logger.Info("Workloads run without their unscheduled Mountpoint Pod (mounted another way); detaching them", "mountpointPod", mp, "workloads", n)
			}
		}
		if len(p[mp]) == 0 {
			if err := r.retire(ctx, pod, "no workload left"); err != nil {
				return reconcile.Result{}, err
			}
			delete(p, mp)
		}
	}

	// New workloads: waiting for their mount (a Running pod without an attachment was mounted
	// by something else, e.g. systemd mode, and is left alone).
	// An attachment of Scality's 2.x (no authentication source) only keeps the workloads 2.x
	// attached until they end: new ones go to this driver's own key.
	var newPods []*workload
	for uid, pod := range desired {
		if !attached[uid] && pod.Phase != corev1.PodRunning && !key.Of2x() {
			newPods = append(newPods, pod)
		}
	}
	if len(newPods) > 0 {
		mode, err := r.nodeMode(ctx, key.NodeName)
		if err != nil {
			return reconcile.Result{}, err
		}
		if mode != mountmode.Pod {
			// The node mounts new volumes itself (systemd mode): nothing to create. Existing
			// attachments of the key are still maintained above.
			logger.V(1).Info("Node uses systemd mode; not attaching new workloads", "count", len(newPods))
			newPods = nil
		}
	}
	if len(newPods) > 0 {
		slices.SortFunc(newPods, func(a, b *workload) int {
			if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
				return c
			}
			return compareStrings(string(a.UID), string(b.UID))
		})
		mp, err := r.placement(ctx, key, p, pods, newPods)
		if err != nil {
			for _, pod := range newPods {
				r.recorder.Eventf(pod.ref(), nil, corev1.EventTypeWarning, ReasonMountpointPodFailed, "Mount", "Creating the Mountpoint Pod for PersistentVolume %s failed: %v", key.PVName, err)
			}
			return reconcile.Result{}, err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		for _, pod := range newPods {
			p[mp] = append(p[mp], crdv2.WorkloadAttachment{WorkloadPodUID: string(pod.UID), AttachmentTime: now})
		}
		logger.V(1).Info("Attaching workloads", "mountpointPod", mp, "count", len(newPods))
	}
	if err := r.write(ctx, key, cur, dups, p); err != nil {
		for _, pod := range newPods {
			r.recorder.Eventf(pod.ref(), nil, corev1.EventTypeWarning, ReasonAttachmentWriteFailed, "Mount", "Recording the Mountpoint Pod attachment for PersistentVolume %s failed: %v", key.PVName, err)
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// attachments returns the key's canonical attachment (nil when none) and any duplicates.
func (r *Reconciler) attachments(ctx context.Context, key podcontract.Key) (*crdv2.MountpointS3PodAttachment, []*crdv2.MountpointS3PodAttachment, error) {
	var list crdv2.MountpointS3PodAttachmentList
	if err := r.client.List(ctx, &list, client.MatchingFields{podcontract.IndexKey: key.String()}); err != nil {
		return nil, nil, err
	}
	name := podcontract.AttachmentName(key)
	var cur *crdv2.MountpointS3PodAttachment
	var dups []*crdv2.MountpointS3PodAttachment
	for i := range list.Items {
		if list.Items[i].Name == name {
			cur = &list.Items[i]
		} else {
			dups = append(dups, &list.Items[i])
		}
	}
	if cur == nil && key.Of2x() && len(dups) > 0 {
		// Scality 2.x's attachment (generated name): kept and updated under its own name, so
		// that its workloads are never briefly in two attachments and a rollback finds it.
		slices.SortFunc(dups, func(a, b *crdv2.MountpointS3PodAttachment) int { return compareStrings(a.Name, b.Name) })
		cur, dups = dups[0], dups[1:]
	}
	return r.overlay.resolve(key, cur), dups, nil
}

// desiredWorkloads returns the key's live workloads by UID: pods using the claim the key's PV is
// bound to, scheduled on the key's node, not ended, whose own key (fsGroup, ...) is this key
// (the authentication source aside for a key of Scality's 2.x, which has none).
func (r *Reconciler) desiredWorkloads(ctx context.Context, key podcontract.Key) (map[string]*workload, error) {
	var pv corev1.PersistentVolume
	if err := r.client.Get(ctx, types.NamespacedName{Name: key.PVName}, &pv); err != nil {
		if apierrors.IsNotFound(err) {
			return map[string]*workload{}, nil // no PV, no workload can use it
		}
		return nil, err
	}
	if !isOurs(&pv) || pv.Spec.ClaimRef == nil {
		return map[string]*workload{}, nil
	}
	claim := pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
	desired := map[string]*workload{}
	for _, w := range r.workloads.by(ctx, indexWorkloadClaim, claim) {
		own := keyFor(w, &pv)
		if key.Of2x() {
			own.AuthSource = "" // an attachment of Scality's 2.x: its key has no authentication source
		}
		if w.NodeName != key.NodeName || w.ended() || own != key {
			continue
		}
		desired[string(w.UID)] = w
	}
	return desired, nil
}

// mountpointPod returns a Mountpoint Pod from the cache; a pod this controller just created and
// the cache has not seen yet counts as existing (with an empty status). A pod missing from the
// cache is confirmed missing with a direct read before it is given up.
func (r *Reconciler) mountpointPod(ctx context.Context, name string) (*corev1.Pod, bool, error) {
	nn := types.NamespacedName{Namespace: r.cfg.MountpointPod.Namespace, Name: name}
	var pod corev1.Pod
	err := r.client.Get(ctx, nn, &pod)
	if err == nil {
		r.expect.observed(name)
		return &pod, true, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	if r.expect.pending(name) {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nn.Namespace, Labels: map[string]string{podcontract.LabelDriverVersion: podcontract.VersionLabel(r.cfg.MountpointPod.DriverVersion)}}}, true, nil
	}
	if err := r.apiReader.Get(ctx, nn, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return &pod, true, nil
}

// shareable reports whether new workloads may join a Mountpoint Pod.
func (r *Reconciler) shareable(pod *corev1.Pod) bool {
	return pod.Annotations[podcontract.AnnotationNeedsUnmount] == "" && pod.Annotations[podcontract.AnnotationNoNewWorkload] == "" &&
		pod.Labels[podcontract.LabelDriverVersion] == podcontract.VersionLabel(r.cfg.MountpointPod.DriverVersion) &&
		pod.DeletionTimestamp == nil
}

// placement picks the Mountpoint Pod new workloads join: a shareable one already in the plan,
// else one an earlier attempt created for any of them but did not record, else a new one named
// after the first new workload.
func (r *Reconciler) placement(ctx context.Context, key podcontract.Key, p plan, pods map[string]*corev1.Pod, newPods []*workload) (string, error) {
	for _, mp := range slices.Sorted(maps.Keys(p)) {
		if r.shareable(pods[mp]) {
			return mp, nil
		}
	}
	// An attempt that created a Mountpoint Pod and then failed to record it (a controller killed
	// in between, a conflicting attachment write) may have named it after any workload still
	// waiting: newPods' order is not stable across attempts, since creation times tie within a
	// second and a later attempt sees more workloads. Adopting it keeps one Mountpoint Pod per
	// key instead of leaving an orphan to serve until the orphan grace retires it.
	for _, w := range newPods {
		name := podcontract.MountpointPodName(string(w.UID), key.PVName)
		if existing, ok := r.cachedMountpointPod(ctx, name, key.PVName); ok && r.adoptable(existing, key) {
			log.FromContext(ctx).Info("Adopting a Mountpoint Pod an earlier attempt created", "mountpointPod", name)
			return name, nil
		}
	}
	res, err := r.resources(ctx, key.PVName)
	if err != nil {
		return "", err
	}
	for _, w := range newPods {
		name := podcontract.MountpointPodName(string(w.UID), key.PVName)
		pod := buildMountpointPod(r.cfg.MountpointPod, key, name, string(w.UID), res)
		err := r.client.Create(ctx, pod)
		if err == nil {
			r.expect.add(name)
			r.metrics.mountpointPodsCreated.Inc()
			log.FromContext(ctx).Info("Created Mountpoint Pod", "mountpointPod", name, "node", key.NodeName, "pv", key.PVName)
			return name, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create Mountpoint Pod %s: %w", name, err)
		}
		existing, ok, err := r.mountpointPod(ctx, name)
		if err != nil {
			return "", err
		}
		if ok && r.adoptable(existing, key) {
			return name, nil // created by an earlier attempt (or another replica): adopt it
		}
	}
	return "", fmt.Errorf("%w: every candidate Mountpoint Pod name for PV %s is taken by a pod being retired", errRequeue, key.PVName)
}

// resources returns the Mountpoint Pod resources of the volume pvName: the defaults with the
// PV's overrides (which volumeKey has checked before any workload got this far).
func (r *Reconciler) resources(ctx context.Context, pvName string) (corev1.ResourceRequirements, error) {
	var pv corev1.PersistentVolume
	if err := r.client.Get(ctx, types.NamespacedName{Name: pvName}, &pv); err != nil {
		return corev1.ResourceRequirements{}, err
	}
	var attrs map[string]string
	if pv.Spec.CSI != nil {
		attrs = pv.Spec.CSI.VolumeAttributes
	}
	return mountresources.Resolve(r.cfg.MountpointPod.Resources, attrs)
}

// cachedMountpointPod returns a Mountpoint Pod from the cache, or a placeholder for one this
// controller created for PV pvName that the cache has not seen yet. Unlike mountpointPod it
// never reads the API server: a miss costs nothing, and placement falls back to Create
// (AlreadyExists) anyway.
func (r *Reconciler) cachedMountpointPod(ctx context.Context, name, pvName string) (*corev1.Pod, bool) {
	var pod corev1.Pod
	err := r.client.Get(ctx, types.NamespacedName{Namespace: r.cfg.MountpointPod.Namespace, Name: name}, &pod)
	if err == nil {
		return &pod, true
	}
	if apierrors.IsNotFound(err) && r.expect.pending(name) {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.cfg.MountpointPod.Namespace,
			Labels:      map[string]string{podcontract.LabelDriverVersion: podcontract.VersionLabel(r.cfg.MountpointPod.DriverVersion)},
			Annotations: map[string]string{podcontract.AnnotationVolumeName: pvName}}}, true
	}
	return nil, false
}

// adoptable reports whether an existing Mountpoint Pod may serve the key's new workloads: it
// takes new workloads and was made for the key's PV. Its name is derived from a workload of
// the key and the PV, so the rest of the key (node, options, fsGroup) matches by construction.
func (r *Reconciler) adoptable(pod *corev1.Pod, key podcontract.Key) bool {
	return r.shareable(pod) && pod.Annotations[podcontract.AnnotationVolumeName] == key.PVName &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// retire marks a Mountpoint Pod needs-unmount: the node unmounts it once no workload uses the
// mount, the pod then exits and is deleted. Retiring twice is a no-op.
func (r *Reconciler) retire(ctx context.Context, pod *corev1.Pod, why string) error {
	if pod.Annotations[podcontract.AnnotationNeedsUnmount] != "" {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+podcontract.AnnotationNeedsUnmount+`":"true"}}}`))
	if err := r.client.Patch(ctx, pod, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	log.FromContext(ctx).Info("Retiring Mountpoint Pod", "mountpointPod", pod.Name, "why", why)
	return nil
}

// write makes the key's attachment hold p with as few writes as possible: nothing when
// unchanged, one create/update/delete otherwise; duplicates (already merged into p) are deleted.
func (r *Reconciler) write(ctx context.Context, key podcontract.Key, cur *crdv2.MountpointS3PodAttachment, dups []*crdv2.MountpointS3PodAttachment, p plan) error {
	switch {
	case len(p) == 0 && cur != nil:
		if err := r.client.Delete(ctx, cur, client.Preconditions{ResourceVersion: &cur.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			r.overlay.forget(key)
			return err
		}
		r.overlay.remember(key, nil, cur.ResourceVersion)
		log.FromContext(ctx).Info("Deleted attachment", "attachment", cur.Name)
	case len(p) > 0 && cur == nil:
		a := &crdv2.MountpointS3PodAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: podcontract.AttachmentName(key), Labels: map[string]string{podcontract.LabelDriverVersion: podcontract.VersionLabel(r.cfg.MountpointPod.DriverVersion)}},
			Spec: crdv2.MountpointS3PodAttachmentSpec{
				NodeName: key.NodeName, PersistentVolumeName: key.PVName, VolumeID: key.VolumeID,
				MountOptions: key.MountOptions, WorkloadFSGroup: key.FSGroup, AuthenticationSource: key.AuthSource,
				MountpointS3PodAttachments: p,
			},
		}
		if err := r.client.Create(ctx, a); err != nil {
			r.overlay.forget(key)
			return err
		}
		r.overlay.remember(key, a, "")
	case len(p) > 0 && !reflect.DeepEqual(map[string][]crdv2.WorkloadAttachment(p), cur.Spec.MountpointS3PodAttachments):
		a := cur.DeepCopy()
		replaced := a.ResourceVersion
		a.Spec.MountpointS3PodAttachments = p
		if err := r.client.Update(ctx, a); err != nil {
			r.overlay.forget(key)
			return err
		}
		r.overlay.remember(key, a, replaced)
	}
	for _, d := range dups {
		if err := r.client.Delete(ctx, d, client.Preconditions{ResourceVersion: &d.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		log.FromContext(ctx).Info("Merged and deleted a duplicate attachment", "attachment", d.Name)
	}
	return nil
}

// reconcileMountpointPod deletes a Mountpoint Pod that finished (Succeeded: it unmounted on
// request) and retires one no attachment references (an orphan of an interrupted reconcile).
func (r *Reconciler) reconcileMountpointPod(ctx context.Context, name string) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: r.cfg.MountpointPod.Namespace, Name: name}, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.expect.observed(name)
	if !podcontract.IsMountpointPod(&pod) {
		return reconcile.Result{}, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded {
		return reconcile.Result{}, r.deleteMountpointPod(ctx, &pod, "Deleted finished Mountpoint Pod")
	}
	var refs crdv2.MountpointS3PodAttachmentList
	if err := r.client.List(ctx, &refs, client.MatchingFields{podcontract.IndexMountpointPod: name}); err != nil {
		return reconcile.Result{}, err
	}
	if why, stuck := podcontract.Unschedulable(&pod); stuck {
		if len(refs.Items) == 0 && pod.Spec.NodeName == "" && pod.Annotations[podcontract.AnnotationNeedsUnmount] != "" && pod.DeletionTimestamp == nil {
			// Retired before the scheduler could place it: it never ran, so nothing is mounted
			// and no node plugin will unmount it for it to end; without this it would stay
			// Pending for ever.
			return reconcile.Result{}, r.deleteMountpointPod(ctx, &pod, "Deleted a retired Mountpoint Pod that was never scheduled")
		}
		r.reportUnschedulable(ctx, &pod, refs.Items, why)
	}
	if len(refs.Items) > 0 || pod.Annotations[podcontract.AnnotationNeedsUnmount] != "" || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if age := time.Since(pod.CreationTimestamp.Time); age < r.cfg.OrphanGrace {
		return reconcile.Result{RequeueAfter: r.cfg.OrphanGrace - age}, nil
	}
	return reconcile.Result{}, r.retire(ctx, &pod, "no attachment references it")
}

// reportUnschedulable tells each workload waiting for the Mountpoint Pod pod (as the attachments
// refs record it) that the scheduler cannot place it, and why, with a Warning Event on the
// workload: its owner may not read the Mountpoint Pods' namespace, where the scheduler's own
// FailedScheduling Events are. The workloads are found by a scan of the store (a stuck pod is
// rare); the recorder aggregates repeats.
func (r *Reconciler) reportUnschedulable(ctx context.Context, pod *corev1.Pod, refs []crdv2.MountpointS3PodAttachment, why string) {
	waiting := map[types.UID]bool{}
	for _, a := range refs {
		for _, w := range a.Spec.MountpointS3PodAttachments[pod.Name] {
			waiting[types.UID(w.WorkloadPodUID)] = true
		}
	}
	if len(waiting) == 0 {
		return
	}
	pv := pod.Annotations[podcontract.AnnotationVolumeName]
	for _, w := range r.workloads.withUIDs(waiting) {
		if w.ended() {
			continue
		}
		log.FromContext(ctx).Info("Mountpoint Pod cannot be scheduled", "mountpointPod", pod.Name, "pod", w.Namespace+"/"+w.Name, "why", why)
		r.recorder.Eventf(w.ref(), nil, corev1.EventTypeWarning, ReasonUnschedulable, "Mount",
			"Mountpoint Pod %s/%s for PersistentVolume %s cannot be scheduled: %s", pod.Namespace, pod.Name, pv, why)
	}
}

// deleteMountpointPod deletes pod (this very pod: a UID precondition) and logs what, when it
// was there to delete.
func (r *Reconciler) deleteMountpointPod(ctx context.Context, pod *corev1.Pod, what string) error {
	uid := pod.UID
	if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &uid}); err != nil {
		return client.IgnoreNotFound(err)
	}
	log.FromContext(ctx).Info(what, "mountpointPod", pod.Name)
	return nil
}
