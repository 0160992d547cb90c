package provisioning

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestDeleteNotEmpty: with the default policy (delete) a bucket holding objects is never
// deleted and never reported deleted: FailedPrecondition, with a message saying what to do.
func TestDeleteNotEmpty(t *testing.T) {
	e := newEnv(t, harness.S3Options{Versioning: true})
	vol := e.mustCreate(createReq("pvc-full", nil, nil))
	e.s3.PutObject(t, "pvc-full", "data/file", []byte("keep me"))
	err := e.delete(vol.GetVolumeId(), nil)
	expectCode(t, "DeleteVolume of a non-empty bucket", err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{"still holds objects", "bucketDeletionPolicy is delete", "persistentVolumeReclaimPolicy to Retain"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if !e.s3.ObjectExists(t, "pvc-full", "data/file") {
		t.Fatal("the object is gone")
	}

	// Versioning: an object deleted by the user leaves its old version and a delete marker,
	// which still keep the bucket from being deleted.
	e.s3.EnableVersioning(t, "pvc-full")
	e.s3.PutObject(t, "pvc-full", "data/file", []byte("v2"))
	e.s3.DeleteObject(t, "pvc-full", "data/file")
	if keys := e.s3.ListKeys(t, "pvc-full"); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
	expectCode(t, "DeleteVolume of a bucket with only versions left", e.delete(vol.GetVolumeId(), nil), codes.FailedPrecondition)
	e.expectBuckets("pvc-full")
}

// TestDeleteWithObjects: policy deleteWithObjects empties the bucket — object versions and
// delete markers included — in bounded calls: with a tiny budget every call deletes one page
// and returns Aborted, the next one carries on, the last one deletes the bucket.
func TestDeleteWithObjects(t *testing.T) {
	e := newEnv(t, harness.S3Options{Versioning: true}, "--empty-bucket-budget=1ms")
	vol := e.mustCreate(createReq("pvc-many", map[string]string{"bucketDeletionPolicy": "deleteWithObjects"}, nil))
	const objects = 1500
	// versitygw's posix backend serves files placed in the bucket directory as objects:
	// much faster than 1500 PutObject calls.
	for i := range objects {
		if err := os.WriteFile(filepath.Join(e.s3.DataDir, "pvc-many", fmt.Sprintf("obj-%05d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.s3.EnableVersioning(t, "pvc-many")
	e.s3.PutObject(t, "pvc-many", "obj-00000", []byte("second version"))
	e.s3.DeleteObject(t, "pvc-many", "obj-00001") // a delete marker
	total := e.s3.VersionCount(t, "pvc-many")
	if total < objects+2 {
		t.Fatalf("%d versions and delete markers, want at least %d", total, objects+2)
	}

	var calls, aborted int
	for {
		calls++
		if calls > 10 {
			t.Fatalf("DeleteVolume did not finish in 10 calls")
		}
		err := e.delete(vol.GetVolumeId(), nil)
		if err == nil {
			break
		}
		expectCode(t, "DeleteVolume out of budget", err, codes.Aborted)
		aborted++
		if !e.s3.BucketExists(t, "pvc-many") {
			t.Fatal("Aborted returned but the bucket is gone")
		}
		left := e.s3.VersionCount(t, "pvc-many")
		if left >= total {
			t.Fatalf("call %d deleted nothing (%d versions left)", calls, left)
		}
		total = left
	}
	if aborted < 2 {
		t.Errorf("%d Aborted calls for %d versions: the budget was not applied", aborted, objects)
	}
	e.expectBuckets()
	e.mustDelete(vol.GetVolumeId(), nil)
}

// TestDeleteIdempotent: deleting twice, deleting a volume whose bucket was removed by hand and
// deleting ids the controller never made all succeed without touching other buckets.
func TestDeleteIdempotent(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	e.s3.CreateBucket(t, "static-bucket")
	vol := e.mustCreate(createReq("pvc-twice", nil, nil))
	e.mustDelete(vol.GetVolumeId(), nil)
	e.mustDelete(vol.GetVolumeId(), nil)
	for _, id := range []string{"static-bucket", "fake-vol-id", "v1:delete:pvc-never-created", "v1:retain:static-bucket"} {
		e.mustDelete(id, nil)
	}
	e.expectBuckets("static-bucket")
}
