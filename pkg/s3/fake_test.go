package s3

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// fakeAPI is an in-memory bucketAPI: buckets with tags, object versions and multipart uploads.
// Every call is recorded; fail returns an error for an operation name before it runs.
type fakeAPI struct {
	mu      sync.Mutex
	buckets map[string]*fakeBucket
	calls   []string
	// fail, when set, is asked before each operation; a non-nil error is returned instead.
	fail func(op, bucket string) error
	// deleteErrors makes DeleteObjects report these per-key errors (key → code).
	deleteErrors map[string]string
	// created200 makes CreateBucket of an existing bucket of this account answer 200, like
	// AWS in us-east-1.
	created200 bool
}

type fakeBucket struct {
	foreign  bool // owned by another account
	tags     map[string]string
	versions []types.ObjectIdentifier // includes delete markers
	uploads  []types.MultipartUpload
}

func newFake() *fakeAPI { return &fakeAPI{buckets: map[string]*fakeBucket{}} }

func apiErr(code string) error { return &smithy.GenericAPIError{Code: code, Message: code + " (fake)"} }

// put adds n object versions named prefix-i to bucket.
func (f *fakeAPI) put(bucket, prefix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.buckets[bucket]
	for i := range n {
		b.versions = append(b.versions, types.ObjectIdentifier{Key: aws.String(fmt.Sprintf("%s-%05d", prefix, i)), VersionId: aws.String(fmt.Sprintf("v%d", i))})
	}
}

func (f *fakeAPI) objectCount(bucket string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.buckets[bucket].versions)
}

func (f *fakeAPI) start(op, bucket string) (*fakeBucket, error) {
	f.mu.Lock()
	f.calls = append(f.calls, op)
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		if err := fail(op, bucket); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.buckets[bucket]
	if !ok {
		return nil, apiErr("NoSuchBucket")
	}
	if b.foreign && op != "CreateBucket" {
		return nil, apiErr("AccessDenied")
	}
	return b, nil
}

func (f *fakeAPI) CreateBucket(_ context.Context, in *awss3.CreateBucketInput, _ ...func(*awss3.Options)) (*awss3.CreateBucketOutput, error) {
	name := aws.ToString(in.Bucket)
	b, err := f.start("CreateBucket", name)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err == nil && b.foreign:
		return nil, apiErr("BucketAlreadyExists")
	case err == nil && f.created200:
		return &awss3.CreateBucketOutput{}, nil
	case err == nil:
		return nil, apiErr("BucketAlreadyOwnedByYou")
	case apiCode(err) != "NoSuchBucket":
		return nil, err
	}
	f.buckets[name] = &fakeBucket{}
	return &awss3.CreateBucketOutput{}, nil
}

func (f *fakeAPI) DeleteBucket(_ context.Context, in *awss3.DeleteBucketInput, _ ...func(*awss3.Options)) (*awss3.DeleteBucketOutput, error) {
	b, err := f.start("DeleteBucket", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(b.versions) > 0 {
		return nil, apiErr("BucketNotEmpty")
	}
	delete(f.buckets, aws.ToString(in.Bucket))
	return &awss3.DeleteBucketOutput{}, nil
}

func (f *fakeAPI) GetBucketTagging(_ context.Context, in *awss3.GetBucketTaggingInput, _ ...func(*awss3.Options)) (*awss3.GetBucketTaggingOutput, error) {
	b, err := f.start("GetBucketTagging", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(b.tags) == 0 {
		return nil, apiErr("NoSuchTagSet")
	}
	out := &awss3.GetBucketTaggingOutput{}
	for k, v := range b.tags {
		out.TagSet = append(out.TagSet, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	return out, nil
}

func (f *fakeAPI) PutBucketTagging(_ context.Context, in *awss3.PutBucketTaggingInput, _ ...func(*awss3.Options)) (*awss3.PutBucketTaggingOutput, error) {
	b, err := f.start("PutBucketTagging", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b.tags = map[string]string{}
	for _, t := range in.Tagging.TagSet {
		b.tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return &awss3.PutBucketTaggingOutput{}, nil
}

func (f *fakeAPI) ListObjectsV2(_ context.Context, in *awss3.ListObjectsV2Input, _ ...func(*awss3.Options)) (*awss3.ListObjectsV2Output, error) {
	b, err := f.start("ListObjectsV2", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &awss3.ListObjectsV2Output{}
	seen := map[string]bool{}
	for _, v := range b.versions {
		if k := aws.ToString(v.Key); !seen[k] && len(out.Contents) < int(aws.ToInt32(in.MaxKeys)) {
			seen[k] = true
			out.Contents = append(out.Contents, types.Object{Key: v.Key})
		}
	}
	return out, nil
}

func (f *fakeAPI) ListObjectVersions(_ context.Context, in *awss3.ListObjectVersionsInput, _ ...func(*awss3.Options)) (*awss3.ListObjectVersionsOutput, error) {
	b, err := f.start("ListObjectVersions", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &awss3.ListObjectVersionsOutput{}
	for i, v := range b.versions {
		if i == int(aws.ToInt32(in.MaxKeys)) {
			out.IsTruncated = aws.Bool(true)
			break
		}
		if i%2 == 1 { // every other entry is a delete marker
			out.DeleteMarkers = append(out.DeleteMarkers, types.DeleteMarkerEntry{Key: v.Key, VersionId: v.VersionId})
		} else {
			out.Versions = append(out.Versions, types.ObjectVersion{Key: v.Key, VersionId: v.VersionId})
		}
	}
	return out, nil
}

func (f *fakeAPI) DeleteObjects(_ context.Context, in *awss3.DeleteObjectsInput, _ ...func(*awss3.Options)) (*awss3.DeleteObjectsOutput, error) {
	b, err := f.start("DeleteObjects", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(in.Delete.Objects) > pageSize {
		return nil, apiErr("MalformedXML")
	}
	out := &awss3.DeleteObjectsOutput{}
	// A delete with a version id removes that version; one without removes every version of
	// the key (the fake's stand-in for an unversioned bucket).
	dropVersion, dropKey := map[[2]string]bool{}, map[string]bool{}
	for _, id := range in.Delete.Objects {
		k := aws.ToString(id.Key)
		if code, ok := f.deleteErrors[k]; ok {
			out.Errors = append(out.Errors, types.Error{Key: id.Key, Code: aws.String(code), Message: aws.String("fake")})
			continue
		}
		if id.VersionId == nil {
			dropKey[k] = true
		} else {
			dropVersion[[2]string{k, *id.VersionId}] = true
		}
	}
	kept := b.versions[:0]
	for _, v := range b.versions {
		k := aws.ToString(v.Key)
		if !dropKey[k] && !dropVersion[[2]string{k, aws.ToString(v.VersionId)}] {
			kept = append(kept, v)
		}
	}
	b.versions = kept
	return out, nil
}

func (f *fakeAPI) ListMultipartUploads(_ context.Context, in *awss3.ListMultipartUploadsInput, _ ...func(*awss3.Options)) (*awss3.ListMultipartUploadsOutput, error) {
	b, err := f.start("ListMultipartUploads", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(len(b.uploads), int(aws.ToInt32(in.MaxUploads)))
	return &awss3.ListMultipartUploadsOutput{Uploads: append([]types.MultipartUpload(nil), b.uploads[:n]...)}, nil
}

func (f *fakeAPI) AbortMultipartUpload(_ context.Context, in *awss3.AbortMultipartUploadInput, _ ...func(*awss3.Options)) (*awss3.AbortMultipartUploadOutput, error) {
	b, err := f.start("AbortMultipartUpload", aws.ToString(in.Bucket))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, u := range b.uploads {
		if aws.ToString(u.UploadId) == aws.ToString(in.UploadId) {
			b.uploads = append(b.uploads[:i], b.uploads[i+1:]...)
			return &awss3.AbortMultipartUploadOutput{}, nil
		}
	}
	return nil, apiErr("NoSuchUpload")
}

// callCounts returns how many times each operation ran, for assertions.
func (f *fakeAPI) callCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, c := range f.calls {
		out[c]++
	}
	return out
}

func (f *fakeAPI) bucketNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.buckets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var _ bucketAPI = (*fakeAPI)(nil)
