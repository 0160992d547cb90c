package reconciler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

type queue = workqueue.TypedRateLimitingInterface[Request]

// enqueueKey adds a key request, coalescing: a key reconciled less than BatchWindow ago waits
// for the rest of the window, so the events of a burst land in one reconcile (one write). The
// first event of a quiet key is handled at once, and so is every waiting key once the burst
// has ended (releaseHeld): nothing more would join it.
func (r *Reconciler) enqueueKey(q queue, k podcontract.Key) {
	if wait := r.cfg.BatchWindow - r.sinceLast(k); wait > 0 {
		r.hold(q, k)
		q.AddAfter(Request{Key: k}, wait)
		return
	}
	q.Add(Request{Key: k})
}

// hold notes that k waits out its batch window in q.
func (r *Reconciler) hold(q queue, k podcontract.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = map[podcontract.Key]struct{}{}
	}
	r.held[k] = struct{}{}
	r.heldIn = q
}

// releaseHeld adds every key waiting out its batch window at once: the gate calls it when
// workload events have stopped. Each key's delayed add still comes at the window's end; it
// finds the key reconciled, and the reconcile writes nothing (the overlay has the write).
func (r *Reconciler) releaseHeld() {
	r.mu.Lock()
	held, q := r.held, r.heldIn
	r.held = nil
	r.mu.Unlock()
	for k := range held {
		q.Add(Request{Key: k})
	}
}

// enqueueForMountpointPod adds what a Mountpoint Pod event affects: its housekeeping and the
// keys of the attachments naming it.
func (r *Reconciler) enqueueForMountpointPod(ctx context.Context, pod *corev1.Pod, q queue) {
	if pod.Namespace != r.cfg.MountpointPod.Namespace || !podcontract.IsMountpointPod(pod) {
		return
	}
	q.Add(Request{MountpointPod: pod.Name})
	r.enqueueAttachmentsBy(ctx, podcontract.IndexMountpointPod, pod.Name, q)
}

// enqueueForWorkload adds what a workload event affects: the keys of its volumes (or a
// diagnosis request when some cannot be served) and the keys of the attachments recording it.
func (r *Reconciler) enqueueForWorkload(ctx context.Context, w *workload, q queue) {
	if len(w.Claims) == 0 {
		return
	}
	keys, problems, err := r.workloadKeys(ctx, w)
	if err != nil {
		log.FromContext(ctx).Error(err, "Mapping a workload to its volumes failed", "pod", w.Namespace+"/"+w.Name)
	}
	for _, k := range keys {
		r.enqueueKey(q, k)
	}
	if len(problems) > 0 && !w.ended() {
		q.Add(Request{Pod: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
	}
	for _, name := range r.byWorkload.names(string(w.UID)) {
		var a crdv2.MountpointS3PodAttachment
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, &a); err == nil {
			r.enqueueKey(q, podcontract.KeyOf(&a))
		}
	}
}

// onWorkload handles the workload store's events: an addition or deletion (old nil), or an
// update that changes what the reconciler acts on (node, phase, deletion).
func (r *Reconciler) onWorkload(ctx context.Context, old, cur *workload, q queue) {
	if old != nil && old.NodeName == cur.NodeName && old.Phase == cur.Phase && old.Deleting == cur.Deleting {
		return
	}
	if r.gate != nil {
		r.gate.event()
	}
	r.enqueueForWorkload(ctx, cur, q)
}

// enqueueAttachmentsBy adds the keys of the attachments whose index field has value.
func (r *Reconciler) enqueueAttachmentsBy(ctx context.Context, field, value string, q queue) {
	var list crdv2.MountpointS3PodAttachmentList
	if err := r.client.List(ctx, &list, client.MatchingFields{field: value}); err != nil {
		log.FromContext(ctx).Error(err, "Listing attachments failed", "field", field)
		return
	}
	for i := range list.Items {
		r.enqueueKey(q, podcontract.KeyOf(&list.Items[i]))
	}
}

// enqueueForClaim adds what a change of a claim (or of the PV bound to it) affects: the key of
// that one volume for every scheduled pod using the claim (or a diagnosis when it cannot be
// served). Only this claim is looked at, so a pod with many volumes costs O(1) per claim event,
// not O(volumes): the initial sync stays linear.
func (r *Reconciler) enqueueForClaim(ctx context.Context, namespace, name string, q queue) {
	for _, w := range r.workloads.by(ctx, indexWorkloadClaim, namespace+"/"+name) {
		if w.NodeName == "" {
			continue
		}
		k, p, err := r.volumeKey(ctx, w, name)
		switch {
		case err != nil:
			log.FromContext(ctx).Error(err, "Mapping a claim to its volume failed", "claim", namespace+"/"+name)
		case k != nil:
			r.enqueueKey(q, *k)
		case p != nil && !w.ended():
			q.Add(Request{Pod: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
		}
	}
}

// podChanged filters Mountpoint Pod updates down to what the reconciler acts on.
func podChanged(old, cur *corev1.Pod) bool {
	return old.Spec.NodeName != cur.Spec.NodeName || old.Status.Phase != cur.Status.Phase ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		old.Annotations[podcontract.AnnotationNeedsUnmount] != cur.Annotations[podcontract.AnnotationNeedsUnmount] ||
		old.Annotations[podcontract.AnnotationNoNewWorkload] != cur.Annotations[podcontract.AnnotationNoNewWorkload] ||
		schedulingOf(old) != schedulingOf(cur)
}

// mountpointPodHandler handles the events of the manager's pod cache (the Mountpoint Pods'
// namespace).
// schedulingOf is what an Event about pod's scheduling would say ("" when it is not stuck).
func schedulingOf(pod *corev1.Pod) string {
	why, _ := podcontract.Unschedulable(pod)
	return why
}

func (r *Reconciler) mountpointPodHandler() handler.TypedEventHandler[*corev1.Pod, Request] {
	return handler.TypedFuncs[*corev1.Pod, Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*corev1.Pod], q queue) {
			r.enqueueForMountpointPod(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.Pod], q queue) {
			if podChanged(e.ObjectOld, e.ObjectNew) {
				r.enqueueForMountpointPod(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*corev1.Pod], q queue) {
			r.enqueueForMountpointPod(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[*corev1.Pod], q queue) {
			r.enqueueForMountpointPod(ctx, e.Object, q)
		},
	}
}

func (r *Reconciler) claimHandler() handler.TypedEventHandler[*corev1.PersistentVolumeClaim, Request] {
	on := func(ctx context.Context, pvc *corev1.PersistentVolumeClaim, q queue) {
		r.enqueueForClaim(ctx, pvc.Namespace, pvc.Name, q)
	}
	return handler.TypedFuncs[*corev1.PersistentVolumeClaim, Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*corev1.PersistentVolumeClaim], q queue) {
			on(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.PersistentVolumeClaim], q queue) {
			if e.ObjectOld.Status.Phase != e.ObjectNew.Status.Phase || e.ObjectOld.Spec.VolumeName != e.ObjectNew.Spec.VolumeName {
				on(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*corev1.PersistentVolumeClaim], q queue) {
			on(ctx, e.Object, q)
		},
	}
}

func (r *Reconciler) volumeHandler() handler.TypedEventHandler[*corev1.PersistentVolume, Request] {
	on := func(ctx context.Context, pv *corev1.PersistentVolume, q queue) {
		if ref := pv.Spec.ClaimRef; ref != nil {
			r.enqueueForClaim(ctx, ref.Namespace, ref.Name, q)
		}
		r.enqueueAttachmentsBy(ctx, podcontract.IndexPVName, pv.Name, q)
	}
	return handler.TypedFuncs[*corev1.PersistentVolume, Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*corev1.PersistentVolume], q queue) {
			on(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.PersistentVolume], q queue) {
			on(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*corev1.PersistentVolume], q queue) {
			on(ctx, e.Object, q)
		},
	}
}

func (r *Reconciler) attachmentHandler() handler.TypedEventHandler[*crdv2.MountpointS3PodAttachment, Request] {
	on := func(a *crdv2.MountpointS3PodAttachment, q queue) { r.enqueueKey(q, podcontract.KeyOf(a)) }
	// A Mountpoint Pod the scheduler could not place before the attachment recording its
	// workloads was written (the usual order) is examined again, so they hear why they wait;
	// and again when the attachment goes, so that one retired unplaced is deleted.
	stuck := func(ctx context.Context, a *crdv2.MountpointS3PodAttachment, q queue) {
		for mp := range a.Spec.MountpointS3PodAttachments {
			var pod corev1.Pod
			if err := r.client.Get(ctx, types.NamespacedName{Namespace: r.cfg.MountpointPod.Namespace, Name: mp}, &pod); err == nil {
				if _, unschedulable := podcontract.Unschedulable(&pod); unschedulable {
					q.Add(Request{MountpointPod: mp})
				}
			}
		}
	}
	return handler.TypedFuncs[*crdv2.MountpointS3PodAttachment, Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.Object, q)
			stuck(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.ObjectNew, q)
			stuck(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.Object, q)
			stuck(ctx, e.Object, q) // one retired with it is deleted once nothing references it
		},
	}
}

// nodeHandler re-examines the workloads of a node whose mount mode label changed: pending
// workloads of a node switched to pod mode get their Mountpoint Pods.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[*corev1.Node, Request] {
	return handler.TypedFuncs[*corev1.Node, Request]{
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.Node], q queue) {
			if e.ObjectOld.Labels[mountmode.Label] == e.ObjectNew.Labels[mountmode.Label] {
				return
			}
			for _, w := range r.workloads.onNode(e.ObjectNew.Name) {
				r.enqueueForWorkload(ctx, w, q)
			}
		},
	}
}

// requestHandler enqueues requests sent on the resync channel.
func (r *Reconciler) requestHandler() handler.TypedEventHandler[Request, Request] {
	return handler.TypedFuncs[Request, Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[Request], q queue) {
			if e.Object.MountpointPod != "" || e.Object.Pod != (types.NamespacedName{}) {
				q.Add(e.Object)
				return
			}
			r.enqueueKey(q, e.Object.Key)
		},
	}
}

// resyncEvery sends every attachment's key and every Mountpoint Pod to the controller, so a
// missed event (a pod deleted while the controller was down, an orphaned Mountpoint Pod) is
// caught up with: this is the stale-attachment cleaner.
func resyncEvery(ctx context.Context, c client.Reader, ns string, every time.Duration, out chan<- event.TypedGenericEvent[Request], prune func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prune()
		var atts crdv2.MountpointS3PodAttachmentList
		if err := c.List(ctx, &atts); err != nil {
			log.FromContext(ctx).Error(err, "Resync: listing attachments failed")
			continue
		}
		for i := range atts.Items {
			out <- event.TypedGenericEvent[Request]{Object: Request{Key: podcontract.KeyOf(&atts.Items[i])}}
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{podcontract.MountpointPodLabel}); err != nil {
			log.FromContext(ctx).Error(err, "Resync: listing Mountpoint Pods failed")
			continue
		}
		for i := range pods.Items {
			out <- event.TypedGenericEvent[Request]{Object: Request{MountpointPod: pods.Items[i].Name}}
		}
	}
}

// stripNode keeps only a node's identity and labels (nodes are large objects).
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels}}, nil
}

// stripVolume keeps only what the reconciler reads of a PersistentVolume: its identity, its
// claim reference and, for this driver's volumes, the CSI source and mount options (another
// driver's keeps the driver's name only, which says it is not ours).
func stripVolume(obj any) (any, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return obj, nil
	}
	out := &corev1.PersistentVolume{TypeMeta: pv.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion,
		CreationTimestamp: pv.CreationTimestamp, DeletionTimestamp: pv.DeletionTimestamp}}
	if ref := pv.Spec.ClaimRef; ref != nil {
		out.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	}
	if c := pv.Spec.CSI; c != nil {
		if isOurs(pv) {
			out.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: c.Driver, VolumeHandle: c.VolumeHandle, VolumeAttributes: c.VolumeAttributes}
			out.Spec.MountOptions = pv.Spec.MountOptions
		} else {
			out.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: c.Driver}
		}
	}
	return out, nil
}

// stripClaim keeps only what the reconciler reads of a PersistentVolumeClaim: its identity, the
// volume it is bound to, its StorageClass and its phase.
func stripClaim(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	return &corev1.PersistentVolumeClaim{TypeMeta: pvc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Name, Namespace: pvc.Namespace, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion,
			CreationTimestamp: pvc.CreationTimestamp, DeletionTimestamp: pvc.DeletionTimestamp},
		Spec:   corev1.PersistentVolumeClaimSpec{VolumeName: pvc.Spec.VolumeName, StorageClassName: pvc.Spec.StorageClassName},
		Status: corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase},
	}, nil
}
