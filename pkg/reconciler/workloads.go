package reconciler

import (
	"context"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// workload is what the controller keeps of a workload pod (any pod outside the Mountpoint
// Pods' namespace): its identity and what its sharing keys are computed from. Its struct is
// 176 bytes, about 450 with its strings, where a stripped corev1.Pod weighs 1.5 KiB (the Pod
// struct alone is 1,240 bytes, one volume 256 more): the workloads are most of the controller's
// memory in a large cluster.
type workload struct {
	Name, Namespace, ResourceVersion string
	UID                              types.UID
	CreationTimestamp                metav1.Time
	// Deleting is whether the pod has a deletion timestamp.
	Deleting bool
	NodeName string
	Phase    corev1.PodPhase
	// FSGroup is the pod's fsGroup as the key records it ("" when unset).
	FSGroup string
	// Claims are claimNames of the pod.
	Claims []string
}

// GetObjectMeta gives the informer's store the workload's namespace and name (its key); the
// metadata is built on each call, and only those fields are meant to be read from it.
func (w *workload) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, UID: w.UID, ResourceVersion: w.ResourceVersion}
}

// GetObjectKind implements runtime.Object; a workload has no kind of its own.
func (w *workload) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (w *workload) DeepCopyObject() runtime.Object {
	c := *w
	c.Claims = slices.Clone(w.Claims)
	return &c
}

// ended reports whether the workload no longer needs its volumes served.
func (w *workload) ended() bool {
	return w.Deleting || w.Phase == corev1.PodSucceeded || w.Phase == corev1.PodFailed
}

// ref is the pod the workload stands for, as an Event's regarding object.
func (w *workload) ref() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, UID: w.UID, ResourceVersion: w.ResourceVersion},
	}
}

// workloadOf keeps what the reconciler reads of a workload pod.
func workloadOf(pod *corev1.Pod) *workload {
	return &workload{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		CreationTimestamp: pod.CreationTimestamp, Deleting: pod.DeletionTimestamp != nil,
		NodeName: pod.Spec.NodeName,
		Phase:    pod.Status.Phase,
		FSGroup:  fsGroupOf(pod),
		Claims:   claimNames(pod),
	}
}

// toWorkload is the workload informer's transform.
func toWorkload(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return workloadOf(pod), nil
	}
	return obj, nil // a DeletedFinalStateUnknown holds an object already transformed
}

// indexWorkloadClaim indexes workloads by "<namespace>/<claimName>" of each claim they use, the
// store's one index: an index entry costs about as much as a workload, and the other lookup
// (the workloads of a node whose mode label changed) is rare enough to scan for.
const indexWorkloadClaim = "claim"

// workloadStore is the controller's cache of workload pods: an informer over every pod outside
// the Mountpoint Pods' namespace (a field selector; those are in the manager's cache) that keeps
// each as a workload, indexed by claim.
type workloadStore struct {
	informer toolscache.SharedIndexInformer
}

// newWorkloadStore returns the store over cs; run it with Start.
func newWorkloadStore(cs kubernetes.Interface, mountpointNamespace string) (*workloadStore, error) {
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("metadata.namespace", mountpointNamespace).String()
	})
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, toolscache.SharedIndexInformerOptions{
		Indexers: toolscache.Indexers{
			indexWorkloadClaim: func(obj any) ([]string, error) {
				w, ok := obj.(*workload)
				if !ok {
					return nil, nil
				}
				out := make([]string, 0, len(w.Claims))
				for _, c := range w.Claims {
					out = append(out, w.Namespace+"/"+c)
				}
				return out, nil
			},
		},
	})
	if err := inf.SetTransform(toWorkload); err != nil {
		return nil, err
	}
	return &workloadStore{informer: inf}, nil
}

// Start runs the informer until ctx ends (a manager.Runnable; it runs on every replica, so a
// standby has a warm cache when it becomes leader).
func (s *workloadStore) Start(ctx context.Context) error {
	s.informer.RunWithContext(ctx)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the cache runs on standbys too.
func (s *workloadStore) NeedLeaderElection() bool { return false }

// by returns the workloads whose index has value. The workloads are the cache's: read only.
func (s *workloadStore) by(ctx context.Context, index, value string) []*workload {
	objs, err := s.informer.GetIndexer().ByIndex(index, value)
	if err != nil { // only an unknown index name, a programming error
		log.FromContext(ctx).Error(err, "Workload index lookup failed", "index", index)
		return nil
	}
	out := make([]*workload, 0, len(objs))
	for _, o := range objs {
		if w, ok := o.(*workload); ok {
			out = append(out, w)
		}
	}
	return out
}

// onNode returns the workloads scheduled on node (read only), by a scan of the store.
func (s *workloadStore) onNode(node string) []*workload {
	var out []*workload
	for _, o := range s.informer.GetStore().List() {
		if w, ok := o.(*workload); ok && w.NodeName == node {
			out = append(out, w)
		}
	}
	return out
}

// withUIDs returns the workloads whose UID is in uids (read only), by a scan of the store.
func (s *workloadStore) withUIDs(uids map[types.UID]bool) []*workload {
	var out []*workload
	for _, o := range s.informer.GetStore().List() {
		if w, ok := o.(*workload); ok && uids[w.UID] {
			out = append(out, w)
		}
	}
	return out
}

// get returns a workload by namespace and name (read only), or false.
func (s *workloadStore) get(nn types.NamespacedName) (*workload, bool) {
	obj, ok, err := s.informer.GetIndexer().GetByKey(nn.Namespace + "/" + nn.Name)
	if err != nil || !ok {
		return nil, false
	}
	w, ok := obj.(*workload)
	return w, ok
}

// workloadSource feeds the controller's queue from the workload store's events.
type workloadSource struct {
	store  *workloadStore
	handle func(ctx context.Context, old, cur *workload, q queue)
}

var _ source.TypedSyncingSource[Request] = workloadSource{}

// Start registers the handler (the informer replays what it has as additions).
func (s workloadSource) Start(ctx context.Context, q queue) error {
	asWorkload := func(obj any) *workload {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		w, _ := obj.(*workload)
		return w
	}
	_, err := s.store.informer.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if w := asWorkload(obj); w != nil {
				s.handle(ctx, nil, w, q)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if o, w := asWorkload(oldObj), asWorkload(newObj); o != nil && w != nil {
				s.handle(ctx, o, w, q)
			}
		},
		DeleteFunc: func(obj any) {
			if w := asWorkload(obj); w != nil {
				s.handle(ctx, nil, w, q)
			}
		},
	}, toolscache.HandlerOptions{})
	return err
}

// WaitForSync returns once the store has listed every workload, or ctx ended.
func (s workloadSource) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.store.informer.HasSynced) {
		return errors.New("the workload pod cache did not sync")
	}
	return nil
}

// String names the source in controller-runtime's logs.
func (s workloadSource) String() string { return "workload pods" }
