package s3

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// pageSize is the most keys S3 lists, or deletes with DeleteObjects, in one request.
const pageSize = 1000

// EmptyResult counts what one EmptyBucket call removed.
type EmptyResult struct {
	// Objects counts deleted object versions, delete markers and (on stores without
	// versioning support) objects.
	Objects int
	// Uploads counts aborted incomplete multipart uploads.
	Uploads int
}

// EmptyBucket deletes every object version, delete marker and incomplete multipart upload of
// bucket, a page (up to 1000) at a time, until nothing is left or stopAt has passed.
//
// It is bounded and resumable: it checks the time before each page but always completes at
// least one, so repeated calls make progress however short the budget; and it lists from the
// start on every call (deleted keys no longer appear), so a later call carries on where an
// earlier one stopped without any saved state. When time runs out it returns ErrNotEmptied —
// never success with something left. A bucket that does not exist counts as empty. Stores that
// do not implement ListObjectVersions are emptied with ListObjectsV2.
func (c *Client) EmptyBucket(ctx context.Context, bucket string, stopAt time.Time) (EmptyResult, error) {
	var res EmptyResult
	progressed := false
	outOfTime := func() error {
		if progressed && !time.Now().Before(stopAt) {
			return fmt.Errorf("empty bucket %q: %w: this call deleted %d objects and aborted %d uploads before its time ran out", bucket, ErrNotEmptied, res.Objects, res.Uploads)
		}
		return nil
	}
	versions := true
	for {
		if err := outOfTime(); err != nil {
			return res, err
		}
		ids, err := c.listPage(ctx, bucket, &versions)
		if errors.Is(err, ErrNoSuchBucket) {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		if len(ids) == 0 {
			break
		}
		deleted, err := c.deleteObjects(ctx, bucket, ids)
		res.Objects += deleted
		if err != nil {
			return res, err
		}
		progressed = true
	}
	for {
		if err := outOfTime(); err != nil {
			return res, err
		}
		out, err := c.api.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket), MaxUploads: aws.Int32(pageSize)})
		switch {
		case apiCode(err) == "NotImplemented" || errors.Is(kindOf(err), ErrNoSuchBucket):
			return res, nil
		case err != nil:
			return res, classify("list multipart uploads of bucket", bucket, err)
		case len(out.Uploads) == 0:
			return res, nil
		}
		for _, u := range out.Uploads {
			_, err := c.api.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: u.Key, UploadId: u.UploadId})
			if err != nil && apiCode(err) != "NoSuchUpload" {
				return res, classify("abort multipart upload in bucket", bucket, err)
			}
			res.Uploads++
		}
		progressed = true
	}
}

// listPage returns the first page of object versions and delete markers (or, once versions is
// false, of objects) left in bucket. It turns versions off when the store does not implement
// ListObjectVersions.
func (c *Client) listPage(ctx context.Context, bucket string, versions *bool) ([]types.ObjectIdentifier, error) {
	if *versions {
		out, err := c.api.ListObjectVersions(ctx, &awss3.ListObjectVersionsInput{Bucket: aws.String(bucket), MaxKeys: aws.Int32(pageSize)})
		if err == nil {
			ids := make([]types.ObjectIdentifier, 0, len(out.Versions)+len(out.DeleteMarkers))
			for _, v := range out.Versions {
				ids = append(ids, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
			}
			for _, m := range out.DeleteMarkers {
				ids = append(ids, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
			}
			return ids, nil
		}
		if apiCode(err) != "NotImplemented" {
			return nil, classify("list object versions of bucket", bucket, err)
		}
		*versions = false
	}
	out, err := c.api.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), MaxKeys: aws.Int32(pageSize)})
	if err != nil {
		return nil, classify("list objects of bucket", bucket, err)
	}
	ids := make([]types.ObjectIdentifier, 0, len(out.Contents))
	for _, o := range out.Contents {
		ids = append(ids, types.ObjectIdentifier{Key: o.Key})
	}
	return ids, nil
}

// deleteObjects deletes ids (at most pageSize) in one request and returns how many went; any
// key the store could not delete fails the call, named with the store's error code.
func (c *Client) deleteObjects(ctx context.Context, bucket string, ids []types.ObjectIdentifier) (int, error) {
	out, err := c.api.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
		Bucket: aws.String(bucket),
		Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return 0, classify("delete objects in bucket", bucket, err)
	}
	var failed []types.Error
	for _, e := range out.Errors {
		if aws.ToString(e.Code) != "NoSuchKey" && aws.ToString(e.Code) != "NoSuchVersion" {
			failed = append(failed, e)
		}
	}
	deleted := len(ids) - len(out.Errors)
	if len(failed) == 0 {
		return deleted, nil
	}
	first := failed[0]
	code := aws.ToString(first.Code)
	detail := fmt.Sprintf("%d of %d objects were not deleted, the first (%q) with %s: %s", len(failed), len(ids), aws.ToString(first.Key), code, aws.ToString(first.Message))
	switch {
	case deniedCodes[code]:
		return deleted, fmt.Errorf("delete objects in bucket %q: %w: %s", bucket, ErrAccessDenied, detail)
	case transientCodes[code]:
		return deleted, fmt.Errorf("delete objects in bucket %q: %w: %s", bucket, ErrUnavailable, detail)
	}
	return deleted, fmt.Errorf("delete objects in bucket %q: %s", bucket, detail)
}
