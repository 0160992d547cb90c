package reconciler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/source"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=mount-s3,resources=pods,verbs=create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims;persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=s3.csi.scality.com,resources=mountpoints3podattachments,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// CacheOptions returns the cache options the controller's manager must use, given the Mountpoint
// Pods' namespace: the manager caches the pods of that namespace only (the Mountpoint Pods),
// stripped to what the reconciler reads; workload pods are in the reconciler's own compact
// store (workloadStore). Managed fields are dropped from everything.
func CacheOptions(mountpointNamespace string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Namespaces: map[string]cache.Config{mountpointNamespace: {}}, Transform: podcontract.StripMountpointPod},
			&corev1.Node{}:                  {Transform: stripNode},
			&corev1.PersistentVolume{}:      {Transform: stripVolume},
			&corev1.PersistentVolumeClaim{}: {Transform: stripClaim},
		},
	}
}

// Options are the controller's tuning knobs beyond Config.
type Options struct {
	// Workers bounds the concurrent reconciles while workload events keep arriving, and
	// DrainWorkers once none has for a quarter of a second (gate): a burst is coalesced in the
	// queue, then what it left is written at full concurrency. DrainWorkers below Workers is
	// Workers.
	Workers, DrainWorkers int
	// ResyncInterval is how often every attachment and Mountpoint Pod is reconciled again
	// (the stale-attachment cleaner).
	ResyncInterval time.Duration
}

// Setup registers the indexes, the controller, its watches, its metrics and the periodic
// resync with mgr. The resync runs only on the leader.
func Setup(ctx context.Context, mgr manager.Manager, cfg Config, opts Options) (*Reconciler, error) {
	if cfg.MountpointPod.Namespace == "" || cfg.MountpointPod.Image == "" {
		return nil, fmt.Errorf("reconciler: Mountpoint Pod namespace and image are required")
	}
	// Workload pods are listed and watched as protobuf: half the bytes of JSON to decode.
	pb := rest.CopyConfig(mgr.GetConfig())
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(pb)
	if err != nil {
		return nil, err
	}
	// The attachments' workload UIDs are indexed by workloadAttachments, not a field index: one
	// set per workload would cost more than the workloads themselves.
	if err := podcontract.IndexAttachments(ctx, mgr.GetFieldIndexer(), podcontract.IndexKey, podcontract.IndexPVName, podcontract.IndexMountpointPod); err != nil {
		return nil, err
	}
	workloads, err := newWorkloadStore(cs, cfg.MountpointPod.Namespace)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(workloads); err != nil {
		return nil, err
	}
	byWorkload := newWorkloadAttachments()
	attInformer, err := mgr.GetCache().GetInformer(ctx, &crdv2.MountpointS3PodAttachment{})
	if err != nil {
		return nil, err
	}
	if _, err := attInformer.AddEventHandler(byWorkload.handler()); err != nil {
		return nil, err
	}
	r := &Reconciler{
		workloads:  workloads,
		byWorkload: byWorkload,
		client:     mgr.GetClient(),
		apiReader:  mgr.GetAPIReader(),
		recorder:   mgr.GetEventRecorder("scality-csi-controller"),
		cfg:        cfg,
		metrics:    newMetrics(mgr.GetCache(), cfg.MountpointPod.Namespace),
		gate:       newGate(opts.Workers, opts.DrainWorkers, defaultQuietAfter),
	}
	r.gate.onQuiet = r.releaseHeld
	if err := r.metrics.register(ctrlmetrics.Registry); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	c, err := controller.NewTyped[Request]("mountpoint-s3-pod-attachments", mgr, controller.TypedOptions[Request]{
		Reconciler:              r,
		MaxConcurrentReconciles: r.gate.drain,
	})
	if err != nil {
		return nil, err
	}
	resync := make(chan event.TypedGenericEvent[Request], 1024)
	for _, src := range []source.TypedSource[Request]{
		source.TypedKind(mgr.GetCache(), &corev1.Pod{}, r.mountpointPodHandler()),
		workloadSource{store: workloads, handle: r.onWorkload},
		source.TypedKind(mgr.GetCache(), &corev1.PersistentVolumeClaim{}, r.claimHandler()),
		source.TypedKind(mgr.GetCache(), &corev1.PersistentVolume{}, r.volumeHandler()),
		source.TypedKind(mgr.GetCache(), &crdv2.MountpointS3PodAttachment{}, r.attachmentHandler()),
		source.TypedKind(mgr.GetCache(), &corev1.Node{}, r.nodeHandler()),
		source.TypedChannel(resync, r.requestHandler()),
	} {
		if err := c.Watch(src); err != nil {
			return nil, err
		}
	}
	interval := opts.ResyncInterval
	if interval <= 0 {
		interval = 2 * time.Minute
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		resyncEvery(ctx, mgr.GetClient(), cfg.MountpointPod.Namespace, interval, resync, r.pruneLast)
		return nil
	})); err != nil {
		return nil, err
	}
	return r, nil
}
