package reconciler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Field indexes of the controller's pod cache (the attachment indexes are podcontract's).
const (
	// indexPodClaim indexes pods by "<namespace>/<claimName>" of each PVC they use.
	indexPodClaim = "s3csi.claim"
	// indexPodNode indexes pods by spec.nodeName.
	indexPodNode = "s3csi.node"
)

// indexPods registers the pod indexes (by claim, by node).
func indexPods(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &corev1.Pod{}, indexPodClaim, func(o client.Object) []string {
		pod := o.(*corev1.Pod)
		var claims []string
		for _, c := range claimNames(pod) {
			claims = append(claims, pod.Namespace+"/"+c)
		}
		return claims
	})
}
