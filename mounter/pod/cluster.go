package pod

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// The node plugin reads attachments and this node's Mountpoint Pods, nothing else.
// +kubebuilder:rbac:groups=s3.csi.scality.com,resources=mountpoints3podattachments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=mount-s3,resources=pods,verbs=get;list;watch

// Cluster is the node plugin's view of pod mode: this node's MountpointS3PodAttachments and
// Mountpoint Pods, from an informer cache filtered to the node, with waits that wake up on
// informer events (no polling).
type Cluster struct {
	node, namespace string
	cache           cache.Cache
	api             client.Reader

	// attachmentWait bounds the wait for the controller to attach a workload: the controller
	// never attaches a workload that is gone, and kubelet keeps a publish of a deleted pod
	// running to its own deadline (2 minutes), holding every other operation on the volume
	// meanwhile. Past it kubelet retries (after half a second at first) if the pod still exists.
	attachmentWait time.Duration
	// unplaceableAfter, when positive, ends a wait with mounter.ErrUnplaceable once the
	// workload's Mountpoint Pod has been unschedulable that long (the fallback to systemd).
	unplaceableAfter time.Duration

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every relevant event
	onPod   []func(name string, pod *corev1.Pod)
}

// NewCluster returns a Cluster for node, watching Mountpoint Pods in namespace. The attachment
// informer is restricted to the node with the CRD's selectable field spec.nodeName when the API
// server supports it (Kubernetes >= 1.31); otherwise it caches all attachments. A publish waits
// at most attachmentWait (DefaultAttachmentWait when zero) for its workload's attachment, and,
// when unplaceableAfter is positive, at most that long for a Mountpoint Pod the scheduler
// cannot place (counted from the scheduler's first refusal).
func NewCluster(ctx context.Context, cfg *rest.Config, node, namespace string, attachmentWait, unplaceableAfter time.Duration) (*Cluster, error) {
	if attachmentWait <= 0 {
		attachmentWait = DefaultAttachmentWait
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := crdv2.AddToScheme(scheme); err != nil {
		return nil, err
	}
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	onNode := fields.OneTermEqualSelector("spec.nodeName", node)
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Namespaces: map[string]cache.Config{namespace: {}}, Field: onNode, Transform: podcontract.StripMountpointPod},
	}
	var probe crdv2.MountpointS3PodAttachmentList
	switch err := api.List(ctx, &probe, client.MatchingFieldsSelector{Selector: onNode}, client.Limit(1)); {
	case err == nil:
		byObject[&crdv2.MountpointS3PodAttachment{}] = cache.ByObject{Field: onNode}
	case apierrors.IsBadRequest(err):
		klog.InfoS("The API server cannot select attachments by node; caching all of them", "err", err)
	default:
		return nil, fmt.Errorf("%w: list MountpointS3PodAttachments: %v", mounter.ErrUnavailable, err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("informer cache: %w", err)
	}
	if err := podcontract.IndexAttachments(ctx, c, podcontract.IndexWorkloadUID); err != nil {
		return nil, err
	}
	return &Cluster{node: node, namespace: namespace, cache: c, api: api, changed: make(chan struct{}), attachmentWait: attachmentWait,
		unplaceableAfter: unplaceableAfter}, nil
}

// OnMountpointPod registers f to run on every add, update (pod set) or delete (pod nil) of one of
// this node's Mountpoint Pods (the unmounter and the mount monitor use it). Call before Start.
func (c *Cluster) OnMountpointPod(f func(name string, pod *corev1.Pod)) {
	c.onPod = append(c.onPod, f)
}

// Start runs the informers until ctx ends and returns once they have synced.
func (c *Cluster) Start(ctx context.Context) error {
	for _, obj := range []client.Object{&crdv2.MountpointS3PodAttachment{}, &corev1.Pod{}} {
		inf, err := c.cache.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.event(o, false) },
			UpdateFunc: func(_, o any) { c.event(o, false) },
			DeleteFunc: func(o any) { c.event(o, true) },
		}); err != nil {
			return err
		}
	}
	go func() {
		if err := c.cache.Start(ctx); err != nil {
			klog.ErrorS(err, "Pod-mode informers stopped")
		}
	}()
	if !c.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("%w: pod-mode informers did not sync", mounter.ErrUnavailable)
	}
	return nil
}

func (c *Cluster) event(o any, deleted bool) {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		for _, f := range c.onPod {
			if deleted {
				f(p.Name, nil)
			} else {
				f(p.Name, p)
			}
		}
	}
}

// wait returns a channel closed at the next event.
func (c *Cluster) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// findAttachment returns the Mountpoint Pod the controller assigned to the workload's volume on
// this node, if any.
func (c *Cluster) findAttachment(ctx context.Context, workloadUID, pvName, volumeID string) (string, error) {
	var list crdv2.MountpointS3PodAttachmentList
	if err := c.cache.List(ctx, &list, client.MatchingFields{podcontract.IndexWorkloadUID: workloadUID}); err != nil {
		return "", err
	}
	return podcontract.MountpointPodOf(list.Items, c.node, workloadUID, pvName, volumeID), nil
}

// MountpointPod returns one of this node's Mountpoint Pods from the cache (nil when absent).
func (c *Cluster) MountpointPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return c.getPod(ctx, c.cache, name)
}

// ReadMountpointPod reads one Mountpoint Pod whole from the API server (nil when absent).
func (c *Cluster) ReadMountpointPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return c.getPod(ctx, c.api, name)
}

// getPod reads Mountpoint Pod name from r (nil when absent).
func (c *Cluster) getPod(ctx context.Context, r client.Reader, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := r.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return &p, nil
}

// MountpointPods lists this node's Mountpoint Pods.
func (c *Cluster) MountpointPods(ctx context.Context) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.cache.List(ctx, &list, client.InNamespace(c.namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// errNotReady carries what is missing when a wait ends before the Mountpoint Pod is usable.
var errNotReady = errors.New("the Mountpoint Pod is not ready")

// DefaultAttachmentWait is how long a publish waits for the controller to attach its workload
// when NewCluster is given no wait.
const DefaultAttachmentWait = 30 * time.Second

// WaitForMountpointPod waits until the controller has attached the workload's volume to a
// Mountpoint Pod on this node and that pod is Running, and returns the pod. It waits for the
// attachment at most the Cluster's attachment wait, for a pod the scheduler cannot place at
// most the Cluster's unplaceable bound (when set; the error then wraps mounter.ErrUnplaceable),
// and otherwise until ctx ends. When a wait ends first the error says exactly what is missing:
// the attachment (look at the controller), or the pod and why it is not running
// (unschedulable, image pull, ...).
func (c *Cluster) WaitForMountpointPod(ctx context.Context, workloadUID, pvName, volumeID string) (*corev1.Pod, error) {
	attachBy := time.NewTimer(c.attachmentWait)
	defer attachBy.Stop()
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	var checkAt time.Time // when to ask the API about a pod on no node again
	for {
		next := c.wait() // before reading, so no event is missed
		name, err := c.findAttachment(ctx, workloadUID, pvName, volumeID)
		if err != nil {
			return nil, err
		}
		if name != "" {
			pod, err := c.MountpointPod(ctx, name)
			if err != nil {
				return nil, err
			}
			if pod != nil && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
				return pod, nil
			}
			if pod == nil && c.unplaceableAfter > 0 && !time.Now().Before(checkAt) {
				// Not on this node (yet), and the cache holds only this node's pods: ask the API
				// whether the scheduler refused it: every unplacedRecheck until it has, then when
				// the bound is reached.
				left, why, stuck := c.unplaceableFor(ctx, name)
				if stuck && left <= 0 {
					return nil, fmt.Errorf("%w: Mountpoint Pod %s/%s for PersistentVolume %s has not been scheduled for %v: %s",
						mounter.ErrUnplaceable, c.namespace, name, pvName, c.unplaceableAfter, why)
				}
				if !stuck {
					left = unplacedRecheck
				}
				checkAt = time.Now().Add(left)
				recheck.Reset(left)
			}
		}
		var attachExpired <-chan time.Time
		if name == "" {
			attachExpired = attachBy.C
		}
		select {
		case <-next:
		case <-recheck.C:
		case <-attachExpired:
			return nil, fmt.Errorf("%w (%w): %s", context.DeadlineExceeded, errNotReady, c.diagnose(name, workloadUID, pvName))
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w): %s", ctx.Err(), errNotReady, c.diagnose(name, workloadUID, pvName))
		}
	}
}

// unplacedRecheck is how often a wait with an unplaceable bound asks the API about a Mountpoint
// Pod that is on no node yet.
const unplacedRecheck = 2 * time.Second

// unplaceableFor reads Mountpoint Pod name from the API and reports, when the scheduler has
// refused it (it is on no node), how much of the unplaceable bound is left and the scheduler's
// reason. A pod that cannot be read counts as not refused: the wait goes on.
func (c *Cluster) unplaceableFor(ctx context.Context, name string) (time.Duration, string, bool) {
	ctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	pod, err := c.ReadMountpointPod(ctx, name)
	if err != nil || pod == nil {
		if err != nil {
			klog.V(2).InfoS("Mountpoint Pod not read", "mountpointPod", name, "err", err)
		}
		return 0, "", false
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return 0, "", false
	}
	why, since, stuck := podcontract.UnschedulableSince(pod)
	if !stuck {
		return 0, "", false
	}
	return c.unplaceableAfter - time.Since(since), why, true
}

// diagnose explains why a workload's Mountpoint Pod is not usable, reading the API directly.
func (c *Cluster) diagnose(name, workloadUID, pvName string) string {
	ctx, cancel := context.WithTimeout(context.Background(), diagnoseTimeout)
	defer cancel()
	if name == "" {
		return fmt.Sprintf("no MountpointS3PodAttachment records workload %s for PersistentVolume %s on node %s: the controller has not served it; check the Pod Reconciler (kubectl logs -n <driver namespace> deploy/s3-pod-reconciler, pods labelled app=s3-pod-reconciler) and the events of the workload pod", workloadUID, pvName, c.node)
	}
	var pod corev1.Pod
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Mountpoint Pod %s/%s does not exist (yet); the controller creates it", c.namespace, name)
		}
		return fmt.Sprintf("Mountpoint Pod %s/%s: %v", c.namespace, name, err)
	}
	var why []string
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			why = append(why, fmt.Sprintf("not scheduled: %s: %s", cond.Reason, cond.Message))
		}
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != c.node {
		why = append(why, fmt.Sprintf("scheduled on node %s, not %s", pod.Spec.NodeName, c.node))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, fmt.Sprintf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message))
		}
	}
	if pod.DeletionTimestamp != nil {
		why = append(why, "being deleted")
	}
	if len(why) == 0 {
		why = append(why, "no reason reported yet")
	}
	return fmt.Sprintf("Mountpoint Pod %s/%s is %s: %s (kubectl describe pod -n %s %s)", c.namespace, name, phaseOf(&pod), strings.Join(why, "; "), c.namespace, name)
}

func phaseOf(p *corev1.Pod) corev1.PodPhase {
	if p.Status.Phase == "" {
		return corev1.PodPending
	}
	return p.Status.Phase
}
