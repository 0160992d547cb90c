package driver

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/s3"
)

// legacyVolumeID is the volume id, and bucket name, of a volume that Scality's 1.x driver
// provisioned dynamically: "csi-s3-" and a random (version 4) UUID in lower case (its
// controller's CreateVolume, anchors §6.6). This driver never makes such an id.
var legacyVolumeID = regexp.MustCompile(`^csi-s3-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// legacyDynamicBucket returns the bucket of a 1.x dynamic volume id, and whether id is one.
func legacyDynamicBucket(id string) (string, bool) {
	return id, legacyVolumeID.MatchString(id)
}

// deleteLegacyBucket deletes the bucket of a volume Scality's 1.x driver provisioned, as its
// StorageClass (reclaimPolicy Delete) promised: 1.x's DeleteVolume called DeleteBucket, which
// S3 refuses for a bucket that holds anything, and reported success whatever happened, so a
// bucket with data stayed behind silently. Here an empty bucket is deleted, a missing one is
// success, and one that still holds objects is kept with a FailedPrecondition that says so
// (the provisioner retries, so emptying it finishes the deletion). 1.x never tagged its
// buckets, so there is no owner tag to check: the id's form is the proof, and the
// external-provisioner only deletes volumes it provisioned under this driver's name.
func (s *ControllerServer) deleteLegacyBucket(ctx context.Context, secrets map[string]string, bucket string) (string, error) {
	client, _, err := s.client(secrets)
	if err != nil {
		return "", err
	}
	release, ok := s.inflight.TryAcquire(bucket)
	if !ok {
		return "", fieldError("volume_id", fmt.Errorf("%w: bucket %s", errVolumeBusy, bucket))
	}
	defer release()
	err = client.DeleteBucket(ctx, bucket)
	switch {
	case errors.Is(err, s3.ErrNoSuchBucket):
		klog.V(2).InfoS("Bucket of a 1.x volume already deleted", "volumeID", bucket, "bucket", bucket)
		return resultAbsent, nil
	case errors.Is(err, s3.ErrBucketNotEmpty):
		return "", fmt.Errorf("delete volume %q: this volume was provisioned by Scality's 1.x driver, whose reclaimPolicy Delete deletes an empty bucket only, and bucket %q still holds objects "+
			"(or object versions, or incomplete uploads); the bucket is kept (1.x kept it too, but said nothing). Empty it and the deletion succeeds on the provisioner's next retry, or, to keep the data, "+
			"set the PersistentVolume's persistentVolumeReclaimPolicy to Retain and delete the PersistentVolume: %w", bucket, bucket, err)
	case err != nil:
		return "", fmt.Errorf("delete volume %q (provisioned by Scality's 1.x driver): %w", bucket, err)
	}
	klog.V(2).InfoS("Deleted the bucket of a deleted 1.x volume", "volumeID", bucket, "bucket", bucket)
	return resultDeleted, nil
}
