package s3

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Tags that mark a bucket as the bucket of one CSI volume.
const (
	TagVolumeName = version.DriverName + "/volume-name"
	TagVolumeID   = version.DriverName + "/volume-id"
)

// Owner is the CSI volume a bucket was created for, stored on the bucket as the tags
// TagVolumeName and TagVolumeID. The zero Owner means the bucket carries no such tags.
type Owner struct {
	VolumeName string
	VolumeID   string
}

// CreateResult says how CreateBucket found the bucket.
type CreateResult string

const (
	// Created means this call created the bucket and marked it.
	Created CreateResult = "created"
	// Existing means the bucket already was marked for the same owner (a retried create).
	Existing CreateResult = "existing"
	// Adopted means the bucket existed in this account, empty and without any tag, and is
	// now marked. This is what a create interrupted between creating and tagging leaves behind.
	Adopted CreateResult = "adopted"
)

// rollbackTimeout bounds the clean-up of a bucket this call created but could not mark; it
// runs even when the request's context has ended.
const rollbackTimeout = 10 * time.Second

// CreateBucket makes sure bucket exists and is marked as owner's. It is idempotent and safe to
// run concurrently for the same owner (from several controller replicas too): the store
// creates a bucket name once, and every caller then converges on the same tags.
//
//   - created now, or already marked for owner: success;
//   - existing in this account, empty and without tags: adopted (see Adopted);
//   - owned by another account (BucketAlreadyExists), marked for another volume, carrying tags
//     this driver did not set, or holding objects without tags: ErrBucketTaken, nothing is
//     changed.
//
// When this call created the bucket but cannot tag it (e.g. the credentials lack
// s3:PutBucketTagging), it deletes the bucket again before returning the error, so a failed
// create leaves nothing behind.
func (c *Client) CreateBucket(ctx context.Context, bucket string, owner Owner) (CreateResult, error) {
	_, err := c.api.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(bucket)})
	created := err == nil
	switch code := apiCode(err); {
	case err == nil, code == "BucketAlreadyOwnedByYou":
	case code == "BucketAlreadyExists":
		return "", fmt.Errorf("create bucket %q: %w: it belongs to another account", bucket, ErrBucketTaken)
	default:
		return "", classify("create bucket", bucket, err)
	}
	// A 200 does not prove the bucket is new: AWS us-east-1 answers 200 to a re-create by the
	// owner. The tags decide in every case.
	tags, err := c.tags(ctx, bucket)
	if err != nil {
		return "", err
	}
	if len(tags) > 0 {
		if got := ownerOf(tags); got == owner {
			return Existing, nil
		} else if got.VolumeName != "" || got.VolumeID != "" {
			return "", fmt.Errorf("create bucket %q: %w: it is the bucket of volume %q (volume id %q)", bucket, ErrBucketTaken, got.VolumeName, got.VolumeID)
		}
		return "", fmt.Errorf("create bucket %q: %w: it exists in this account with tags this driver did not set; not taking it over", bucket, ErrBucketTaken)
	}
	empty, err := c.isEmpty(ctx, bucket)
	if err != nil {
		return "", err
	}
	if !empty {
		return "", fmt.Errorf("create bucket %q: %w: it exists in this account and holds objects, without the tags of this driver; not taking it over", bucket, ErrBucketTaken)
	}
	if err := c.mark(ctx, bucket, owner); err != nil {
		if created {
			c.rollback(ctx, bucket)
		}
		return "", err
	}
	if created {
		return Created, nil
	}
	return Adopted, nil
}

// rollback deletes a bucket this process created but could not mark, if it is still unmarked
// and empty (a concurrent CreateBucket for the same owner may have marked it meanwhile).
func (c *Client) rollback(ctx context.Context, bucket string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	tags, err := c.tags(ctx, bucket)
	if err == nil && len(tags) == 0 {
		var empty bool
		if empty, err = c.isEmpty(ctx, bucket); err == nil && empty {
			err = c.DeleteBucket(ctx, bucket)
		}
	}
	if err != nil {
		klog.ErrorS(err, "Could not remove a bucket created for a volume that failed to provision; remove it by hand if it is still there", "bucket", bucket)
	}
}

// BucketOwner returns the owner marked on bucket: the zero Owner when the bucket has no tags
// of this driver, ErrNoSuchBucket when it does not exist.
func (c *Client) BucketOwner(ctx context.Context, bucket string) (Owner, error) {
	tags, err := c.tags(ctx, bucket)
	if err != nil {
		return Owner{}, err
	}
	return ownerOf(tags), nil
}

// tags returns the bucket's tags (empty when it has none).
func (c *Client) tags(ctx context.Context, bucket string) (map[string]string, error) {
	out, err := c.api.GetBucketTagging(ctx, &awss3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
	if err != nil {
		if apiCode(err) == "NoSuchTagSet" {
			return map[string]string{}, nil
		}
		return nil, classify("read tags of bucket", bucket, err)
	}
	tags := make(map[string]string, len(out.TagSet))
	for _, t := range out.TagSet {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return tags, nil
}

func ownerOf(tags map[string]string) Owner {
	return Owner{VolumeName: tags[TagVolumeName], VolumeID: tags[TagVolumeID]}
}

// mark writes owner's tags on a bucket that has none.
func (c *Client) mark(ctx context.Context, bucket string, owner Owner) error {
	_, err := c.api.PutBucketTagging(ctx, &awss3.PutBucketTaggingInput{
		Bucket: aws.String(bucket),
		Tagging: &types.Tagging{TagSet: []types.Tag{
			{Key: aws.String(TagVolumeName), Value: aws.String(owner.VolumeName)},
			{Key: aws.String(TagVolumeID), Value: aws.String(owner.VolumeID)},
		}},
	})
	return classify("tag bucket", bucket, err)
}

// isEmpty reports whether bucket lists no object.
func (c *Client) isEmpty(ctx context.Context, bucket string) (bool, error) {
	out, err := c.api.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), MaxKeys: aws.Int32(1)})
	if err != nil {
		return false, classify("list objects of bucket", bucket, err)
	}
	return len(out.Contents) == 0, nil
}

// DeleteBucket deletes an empty bucket. A bucket that does not exist is success; one that
// still holds objects, versions or delete markers is ErrBucketNotEmpty.
func (c *Client) DeleteBucket(ctx context.Context, bucket string) error {
	_, err := c.api.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(bucket)})
	if err == nil || errors.Is(kindOf(err), ErrNoSuchBucket) {
		return nil
	}
	return classify("delete bucket", bucket, err)
}
