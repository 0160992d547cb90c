package provisioning

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestDeleteVolumeOf1x: a volume Scality's 1.x driver provisioned (volume id = bucket =
// csi-s3-<uuid v4>, untagged) gets what its StorageClass promised: the bucket is deleted when
// empty; while it holds objects it is kept and the deletion fails with FailedPrecondition
// (1.x reported success and left the bucket behind silently); a bucket already gone is
// success.
func TestDeleteVolumeOf1x(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	const id = "csi-s3-0f6c2a91-5b7e-4d3c-9a18-6e2f4b7c1d05"
	e.s3.CreateBucket(t, id)
	e.s3.PutObject(t, id, "data/file", []byte("keep me"))
	err := e.delete(id, nil)
	expectCode(t, "DeleteVolume of a non-empty 1.x bucket", err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{"Scality's 1.x driver", "still holds objects", "the bucket is kept", "persistentVolumeReclaimPolicy to Retain"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if !e.s3.ObjectExists(t, id, "data/file") {
		t.Fatal("the object is gone")
	}
	e.s3.DeleteObject(t, id, "data/file")
	e.mustDelete(id, nil)
	e.expectBuckets()
	e.mustDelete(id, nil) // already gone: success
}
