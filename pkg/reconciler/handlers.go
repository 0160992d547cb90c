package reconciler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
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
// first event of a quiet key is handled at once.
func (r *Reconciler) enqueueKey(q queue, k podcontract.Key) {
	if wait := r.cfg.BatchWindow - r.sinceLast(k); wait > 0 {
		q.AddAfter(Request{Key: k}, wait)
		return
	}
	q.Add(Request{Key: k})
}

// enqueueForPod adds what a pod event affects: for a Mountpoint Pod, its housekeeping and the
// keys of the attachments naming it; for a workload, the keys of its volumes (or a diagnosis
// request when some cannot be served) and the keys of the attachments recording it.
func (r *Reconciler) enqueueForPod(ctx context.Context, pod *corev1.Pod, q queue) {
	if pod.Namespace == r.cfg.MountpointPod.Namespace {
		if !podcontract.IsMountpointPod(pod) {
			return
		}
		q.Add(Request{MountpointPod: pod.Name})
		r.enqueueAttachmentsBy(ctx, podcontract.IndexMountpointPod, pod.Name, q)
		return
	}
	if len(claimNames(pod)) == 0 {
		return
	}
	keys, problems, err := r.workloadKeys(ctx, pod)
	if err != nil {
		log.FromContext(ctx).Error(err, "Mapping a workload to its volumes failed", "pod", client.ObjectKeyFromObject(pod).String())
	}
	for _, k := range keys {
		r.enqueueKey(q, k)
	}
	if len(problems) > 0 && !isEnded(pod) {
		q.Add(Request{Pod: client.ObjectKeyFromObject(pod)})
	}
	r.enqueueAttachmentsBy(ctx, podcontract.IndexWorkloadUID, string(pod.UID), q)
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
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexPodClaim: namespace + "/" + name}); err != nil {
		log.FromContext(ctx).Error(err, "Listing pods of a claim failed", "claim", namespace+"/"+name)
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" || pod.Namespace == r.cfg.MountpointPod.Namespace {
			continue
		}
		k, p, err := r.volumeKey(ctx, pod, name)
		switch {
		case err != nil:
			log.FromContext(ctx).Error(err, "Mapping a claim to its volume failed", "claim", namespace+"/"+name)
		case k != nil:
			r.enqueueKey(q, *k)
		case p != nil && !isEnded(pod):
			q.Add(Request{Pod: client.ObjectKeyFromObject(pod)})
		}
	}
}

// podChanged filters pod updates down to what the reconciler acts on.
func podChanged(old, cur *corev1.Pod) bool {
	return old.Spec.NodeName != cur.Spec.NodeName || old.Status.Phase != cur.Status.Phase ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		old.Annotations[podcontract.AnnotationNeedsUnmount] != cur.Annotations[podcontract.AnnotationNeedsUnmount] ||
		old.Annotations[podcontract.AnnotationNoNewWorkload] != cur.Annotations[podcontract.AnnotationNoNewWorkload]
}

func (r *Reconciler) podHandler() handler.TypedEventHandler[*corev1.Pod, Request] {
	return handler.TypedFuncs[*corev1.Pod, Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*corev1.Pod], q queue) {
			r.enqueueForPod(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*corev1.Pod], q queue) {
			if podChanged(e.ObjectOld, e.ObjectNew) {
				r.enqueueForPod(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*corev1.Pod], q queue) {
			r.enqueueForPod(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[*corev1.Pod], q queue) {
			r.enqueueForPod(ctx, e.Object, q)
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
	return handler.TypedFuncs[*crdv2.MountpointS3PodAttachment, Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*crdv2.MountpointS3PodAttachment], q queue) {
			on(e.Object, q)
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
			var pods corev1.PodList
			if err := r.client.List(ctx, &pods, client.MatchingFields{indexPodNode: e.ObjectNew.Name}); err != nil {
				log.FromContext(ctx).Error(err, "Listing the pods of a relabelled node failed", "node", e.ObjectNew.Name)
				return
			}
			for i := range pods.Items {
				r.enqueueForPod(ctx, &pods.Items[i], q)
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

// stripPod keeps only what the reconciler reads of a pod (volumes' claims, node, fsGroup,
// phase, identity, labels and annotations), which keeps a cluster-wide pod cache small.
func stripPod(obj any) (any, error) { return strip(obj, ""), nil }

// stripPodOutside is stripPod that also drops, for pods outside namespace (workloads: the
// Mountpoint Pods live in namespace), the metadata the reconciler reads only of Mountpoint Pods:
// labels, annotations, owners, finalizers. A workload's labels and annotations (a
// last-applied-configuration, say) are often most of what a stripped pod would weigh.
func stripPodOutside(namespace string) toolscache.TransformFunc {
	return func(obj any) (any, error) { return strip(obj, namespace), nil }
}

// strip does stripPod's work; pods outside identityOnlyOutside (when not empty) keep only their
// identity of their metadata.
func strip(obj any, identityOnlyOutside string) any {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		Spec:     corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:   corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if identityOnlyOutside != "" && pod.Namespace != identityOnlyOutside {
		out.ObjectMeta = metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp}
	} else {
		out.ObjectMeta = *pod.ObjectMeta.DeepCopy()
		out.ManagedFields = nil
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		fs := *sc.FSGroup
		out.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &fs}
	}
	// Only what claimNames reads is kept: claim references, and the name of each generic
	// ephemeral volume (its claim is <pod>-<volume>; the template is not needed).
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim.DeepCopy()}})
		case v.Ephemeral != nil:
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}
	}
	return out
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
