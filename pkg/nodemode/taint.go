package nodemode

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// TaintAgentNotReady is the startup taint an administrator may put on nodes (any effect) so that
// workloads are not scheduled there before the node plugin can serve S3 volumes. The node plugin
// removes it once kubelet has registered the driver on the node.
const TaintAgentNotReady = version.DriverName + "/agent-not-ready"

// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch

// TaintClient is what the startup taint's removal uses of the API: the Node and its CSINode.
// A kubernetes.Interface is one; the node plugin passes the two typed clients alone, so that its
// binary does not link every API group's client.
type TaintClient interface {
	CoreV1() typedcorev1.CoreV1Interface
	StorageV1() typedstoragev1.StorageV1Interface
}

// RemoveStartupTaint waits until the node's CSINode lists this driver (kubelet registered the
// plugin), then removes TaintAgentNotReady from the Node, keeping every other taint. It retries
// with back-off (0.5 s doubling to 10 s) until done or timeout; a node without the taint is done.
func RemoveStartupTaint(ctx context.Context, cs TaintClient, node string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 500 * time.Millisecond
	for {
		done, err := removeTaintOnce(ctx, cs, node)
		if done {
			return nil
		}
		if err != nil {
			klog.V(4).InfoS("Startup taint not removed yet", "node", node, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("startup taint %s not removed from node %s: %w (last: %v)", TaintAgentNotReady, node, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func removeTaintOnce(ctx context.Context, cs TaintClient, node string) (bool, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	var keep []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != TaintAgentNotReady {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(n.Spec.Taints) {
		return true, nil // nothing to remove
	}
	csiNode, err := cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("CSINode %s does not exist yet", node)
		}
		return false, err
	}
	registered := false
	for _, d := range csiNode.Spec.Drivers {
		registered = registered || d.Name == version.DriverName
	}
	if !registered {
		return false, fmt.Errorf("kubelet has not registered %s on node %s yet", version.DriverName, node)
	}
	// Replace the taint list only if it is still the one read: a concurrent change to the
	// node's taints makes the test fail and the next attempt re-reads.
	if keep == nil {
		keep = []corev1.Taint{}
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": n.Spec.Taints},
		{"op": "replace", "path": "/spec/taints", "value": keep},
	})
	if err != nil {
		return false, err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, err
	}
	klog.InfoS("Removed the startup taint: the node can now serve S3 volumes", "node", node, "taint", TaintAgentNotReady)
	return true, nil
}
