package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// Field indexes of the attachment cache. The sharing fields are the CRD's selectable fields;
// node plugins filter on them too.
const (
	IndexNodeName     = "spec.nodeName"
	IndexPVName       = "spec.persistentVolumeName"
	IndexVolumeID     = "spec.volumeID"
	IndexMountOptions = "spec.mountOptions"
	IndexFSGroup      = "spec.workloadFSGroup"
	IndexAuthSource   = "spec.authenticationSource"
	// IndexKey is the whole sharing key (Key.String()).
	IndexKey = "s3csi.key"
	// IndexWorkloadUID lists every workload pod UID an attachment records.
	IndexWorkloadUID = "s3csi.workloadUID"
	// IndexMountpointPod lists every Mountpoint Pod name an attachment records.
	IndexMountpointPod = "s3csi.mountpointPod"
	// indexPodClaim indexes pods by "<namespace>/<claimName>" of each PVC they use.
	indexPodClaim = "s3csi.claim"
	// indexPodNode indexes pods by spec.nodeName.
	indexPodNode = "s3csi.node"
)

// IndexAttachments registers the attachment field indexes on an indexer (a manager's field
// indexer, or a node plugin's cache).
func IndexAttachments(ctx context.Context, idx client.FieldIndexer) error {
	fields := map[string]func(*crdv2.MountpointS3PodAttachment) []string{
		IndexNodeName:     func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.NodeName} },
		IndexPVName:       func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.PersistentVolumeName} },
		IndexVolumeID:     func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.VolumeID} },
		IndexMountOptions: func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.MountOptions} },
		IndexFSGroup:      func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.WorkloadFSGroup} },
		IndexAuthSource:   func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.AuthenticationSource} },
		IndexKey:          func(a *crdv2.MountpointS3PodAttachment) []string { return []string{keyOf(a).String()} },
		IndexWorkloadUID: func(a *crdv2.MountpointS3PodAttachment) []string {
			var uids []string
			for _, ws := range a.Spec.MountpointS3PodAttachments {
				for _, w := range ws {
					uids = append(uids, w.WorkloadPodUID)
				}
			}
			return uids
		},
		IndexMountpointPod: func(a *crdv2.MountpointS3PodAttachment) []string {
			var names []string
			for name := range a.Spec.MountpointS3PodAttachments {
				names = append(names, name)
			}
			return names
		},
	}
	for field, fn := range fields {
		fn := fn
		if err := idx.IndexField(ctx, &crdv2.MountpointS3PodAttachment{}, field, func(o client.Object) []string {
			return fn(o.(*crdv2.MountpointS3PodAttachment))
		}); err != nil {
			return fmt.Errorf("index attachments by %s: %w", field, err)
		}
	}
	return nil
}

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
