// Package nodemode tracks a node's effective mount mode: the Node's s3.csi.scality.com/mounter
// label when set and valid, else the cluster default (mountmode.Resolve). It watches the
// node's own Node object, so a relabel applies to the next publish without a restart, and it
// reports what happens on the Node itself: an event when the effective mode changes or the label
// is invalid, and the annotation s3.csi.scality.com/effective-mounter with the current mode.
package nodemode

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// AnnotationEffectiveMode records on the Node the mode its node plugin uses for new mounts.
const AnnotationEffectiveMode = version.DriverName + "/effective-mounter"

// Event reasons on the Node.
const (
	ReasonModeChanged  = "S3MountModeChanged"
	ReasonInvalidLabel = "S3MountModeLabelInvalid"
)

// The node plugin reads (and annotates) its own Node and reports events about it.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Watcher is the effective mode of one node.
type Watcher struct {
	node string
	def  mountmode.Mode
	cs   typedcorev1.CoreV1Interface
	rec  record.EventRecorder

	mu      sync.RWMutex
	mode    mountmode.Mode
	invalid string // last invalid label value reported
	synced  bool
}

// New returns a Watcher for node with the cluster default def. It does nothing until Start.
func New(cs typedcorev1.CoreV1Interface, node string, def mountmode.Mode) *Watcher {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.Events("")})
	return &Watcher{node: node, def: def, cs: cs, mode: def,
		rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "scality-s3-csi-driver", Host: node})}
}

// LabelInvalid reports whether the Node's mode label is set to something that is not a mode (the
// default applies meanwhile).
func (w *Watcher) LabelInvalid() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.invalid != ""
}

// Mode returns the current effective mode (the default until the Node was read).
func (w *Watcher) Mode() mountmode.Mode {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.mode
}

// Start watches the Node until ctx ends. It returns once the Node was read (or the informer
// synced without finding it, in which case the default applies).
func (w *Watcher) Start(ctx context.Context) error {
	// An informer of its own on the one Node, not client-go's informer factory: the factory
	// links informers and listers for every API group into the binary, about 10 MiB of code the
	// plugin never runs but maps (issue 24's resident-memory figures).
	selector := fields.OneTermEqualSelector("metadata.name", w.node).String()
	nodes := w.cs.Nodes()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return nodes.Watch(ctx, o)
		},
	}
	// As client-go's generated informers do: a client that cannot stream the initial list (a
	// fake) says so, and the reflector lists instead.
	inf := toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, w.cs), &corev1.Node{}, 10*time.Minute, toolscache.Indexers{})
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(ctx, o) },
		UpdateFunc: func(_, o any) { w.observe(ctx, o) },
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("node %s: informer did not sync", w.node)
	}
	return nil
}

func (w *Watcher) observe(ctx context.Context, o any) {
	node, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	mode, err := mountmode.Resolve(node.Labels, w.def)
	w.mu.Lock()
	prev, first := w.mode, !w.synced
	w.mode, w.synced = mode, true
	label := node.Labels[mountmode.Label]
	reportInvalid := err != nil && label != w.invalid
	if err != nil {
		w.invalid = label
	} else {
		w.invalid = ""
	}
	w.mu.Unlock()
	if reportInvalid {
		klog.ErrorS(err, "Invalid mount mode label on the node", "node", w.node)
		w.rec.Eventf(node, corev1.EventTypeWarning, ReasonInvalidLabel, "%v", err)
	}
	if mode != prev || first {
		if !first {
			klog.InfoS("Effective mount mode changed; new mounts use it, existing mounts keep theirs", "node", w.node, "from", prev, "to", mode)
			w.rec.Eventf(node, corev1.EventTypeNormal, ReasonModeChanged, "New S3 volume mounts on this node use %s mode (was %s); existing mounts keep their mode until their workloads end", mode, prev)
		}
		if node.Annotations[AnnotationEffectiveMode] != string(mode) {
			w.annotate(ctx, mode)
		}
	}
}

func (w *Watcher) annotate(ctx context.Context, mode mountmode.Mode) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationEffectiveMode: string(mode)}}})
	if _, err := w.cs.Nodes().Patch(ctx, w.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		klog.ErrorS(err, "Could not annotate the node with its mount mode", "node", w.node)
	}
}
