package podcontract

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// Field indexes of an attachment cache. The sharing fields are the CRD's selectable fields, so
// node plugins can also ask the API server for their node's attachments only.
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
)

// attachmentIndexes computes each index's values for an attachment.
var attachmentIndexes = map[string]func(*crdv2.MountpointS3PodAttachment) []string{
	IndexNodeName:     func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.NodeName} },
	IndexPVName:       func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.PersistentVolumeName} },
	IndexVolumeID:     func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.VolumeID} },
	IndexMountOptions: func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.MountOptions} },
	IndexFSGroup:      func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.WorkloadFSGroup} },
	IndexAuthSource:   func(a *crdv2.MountpointS3PodAttachment) []string { return []string{a.Spec.AuthenticationSource} },
	IndexKey:          func(a *crdv2.MountpointS3PodAttachment) []string { return []string{KeyOf(a).String()} },
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

// IndexAttachments registers the attachment field indexes named by fields (every one when
// none is named) on an indexer (a manager's field indexer, or a node plugin's cache). Each
// index costs memory per distinct value, so a cache of every attachment in the cluster
// registers only those its owner reads.
func IndexAttachments(ctx context.Context, idx client.FieldIndexer, fields ...string) error {
	for field, fn := range attachmentIndexes {
		if len(fields) > 0 && !slices.Contains(fields, field) {
			continue
		}
		if err := idx.IndexField(ctx, &crdv2.MountpointS3PodAttachment{}, field, func(o client.Object) []string {
			return fn(o.(*crdv2.MountpointS3PodAttachment))
		}); err != nil {
			return fmt.Errorf("index attachments by %s: %w", field, err)
		}
	}
	return nil
}
