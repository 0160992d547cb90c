package provisioning

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestBucketOwnership: a bucket of the derived name that is not this volume's is never taken
// over, and DeleteVolume never deletes a bucket that is not marked as the volume's.
func TestBucketOwnership(t *testing.T) {
	e := newEnv(t, harness.S3Options{IAM: true})
	e.s3.CreateUser(t, "otheraccount", "othersecret123", "userplus")
	other := secrets("otheraccount", "othersecret123")

	t.Run("owned by another account", func(t *testing.T) {
		e.t = t
		// The other account provisions pvc-taken first (through the driver, with its secret).
		theirs := e.mustCreate(createReq("pvc-taken", nil, other))
		_, err := e.create(createReq("pvc-taken", nil, e.rootSecrets()))
		expectCode(t, "CreateVolume of a name whose bucket another account owns", err, codes.AlreadyExists)
		// Nor does the driver's own account get it.
		_, err = e.create(createReq("pvc-taken", nil, nil))
		expectCode(t, "CreateVolume with driver credentials", err, codes.AlreadyExists)
		// Deleting it with credentials that cannot see it is refused, not reported as done.
		err = e.delete(theirs.GetVolumeId(), secrets("NOSUCHKEY", "whatever123"))
		expectCode(t, "DeleteVolume with unknown credentials", err, codes.PermissionDenied)
		e.mustDelete(theirs.GetVolumeId(), other)
	})

	t.Run("same account, not made for this volume", func(t *testing.T) {
		e.t = t
		// A bucket with data and no tags, a bucket with someone's tags, a bucket marked for
		// another volume: none is adopted, none changes.
		e.s3.CreateBucket(t, "pvc-data")
		e.s3.PutObject(t, "pvc-data", "precious", []byte("x"))
		e.s3.CreateBucket(t, "pvc-tagged")
		e.s3.PutBucketTags(t, "pvc-tagged", map[string]string{"team": "a"})
		for _, name := range []string{"pvc-data", "pvc-tagged"} {
			_, err := e.create(createReq(name, nil, nil))
			expectCode(t, "CreateVolume over "+name, err, codes.AlreadyExists)
		}
		vol := e.mustCreate(createReq("pvc-mine", nil, nil))
		_, err := e.create(createReq("pvc-mine", map[string]string{"bucketDeletionPolicy": "retain"}, nil))
		expectCode(t, "CreateVolume of the same name with another deletion policy", err, codes.AlreadyExists)
		if d := cmp.Diff(map[string]string{"team": "a"}, e.s3.BucketTags(t, "pvc-tagged")); d != "" {
			t.Errorf("tags of pvc-tagged changed (-want +got):\n%s", d)
		}
		if len(e.s3.BucketTags(t, "pvc-data")) != 0 || !e.s3.ObjectExists(t, "pvc-data", "precious") {
			t.Error("pvc-data was changed")
		}
		if d := cmp.Diff(vol.GetVolumeId(), e.s3.BucketTags(t, "pvc-mine")["s3.csi.scality.com/volume-id"]); d != "" {
			t.Errorf("pvc-mine re-marked (-want +got):\n%s", d)
		}

		// A delete of a volume id whose bucket is not marked for it keeps the bucket.
		for _, id := range []string{"v1:delete:pvc-tagged", "v1:deleteWithObjects:pvc-data", "v1:deleteWithObjects:pvc-mine"} {
			expectCode(t, "DeleteVolume("+id+")", e.delete(id, nil), codes.FailedPrecondition)
		}
		if !e.s3.ObjectExists(t, "pvc-data", "precious") {
			t.Fatal("a DeleteVolume removed data from a bucket that is not the volume's")
		}
		// The tag removed by hand: refused too, loudly, instead of silently leaking.
		e.s3.PutBucketTags(t, "pvc-mine", map[string]string{"cost-center": "42"})
		expectCode(t, "DeleteVolume of a volume whose bucket lost its tags", e.delete(vol.GetVolumeId(), nil), codes.FailedPrecondition)
		e.expectBuckets("pvc-data", "pvc-mine", "pvc-tagged")
	})

	t.Run("empty untagged bucket is adopted", func(t *testing.T) {
		e.t = t
		// What a CreateVolume interrupted between CreateBucket and PutBucketTagging leaves.
		e.s3.CreateBucket(t, "pvc-interrupted")
		vol := e.mustCreate(createReq("pvc-interrupted", nil, nil))
		if got := e.s3.BucketTags(t, "pvc-interrupted")["s3.csi.scality.com/volume-id"]; got != vol.GetVolumeId() {
			t.Fatalf("adopted bucket marked %q, want %q", got, vol.GetVolumeId())
		}
		e.mustDelete(vol.GetVolumeId(), nil)
		if e.s3.BucketExists(t, "pvc-interrupted") {
			t.Fatal("adopted bucket not deleted")
		}
	})
}
