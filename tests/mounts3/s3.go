package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// objInfo is the metadata the file system needs about one object.
type objInfo struct {
	key   string
	size  int64
	mtime time.Time
}

// listing is one page of a ListObjectsV2 answer: full keys of objects and full common
// prefixes (each ending in the delimiter), plus the continuation token ("" on the last page).
type listing struct {
	objects  []objInfo
	prefixes []string
	next     string
}

// errNotFound is returned by store.head when the object does not exist.
var errNotFound = errors.New("object not found")

// store is the narrow object API the file system uses. Keys are full S3 keys (the --prefix
// is already part of them). Implementations must be safe for concurrent use.
type store interface {
	list(ctx context.Context, prefix, delimiter string, maxKeys int32, token string) (listing, error)
	head(ctx context.Context, key string) (objInfo, error)
	// get returns up to n bytes starting at off (fewer at the end of the object).
	get(ctx context.Context, key string, off, n int64) ([]byte, error)
	put(ctx context.Context, key string, body []byte) error
	del(ctx context.Context, key string) error
}

// s3Store implements store with aws-sdk-go-v2 against one bucket.
type s3Store struct {
	c      *s3.Client
	bucket string
	o      *Options
}

// newS3Client builds the SDK client the way mount-s3 resolves its configuration: the SDK's
// default chain reads credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN,
// AWS_PROFILE with AWS_CONFIG_FILE/AWS_SHARED_CREDENTIALS_FILE, ...), AWS_REGION,
// AWS_ENDPOINT_URL and AWS_MAX_ATTEMPTS from the environment it was given; --profile,
// --region and --endpoint-url override them; the region defaults to us-east-1.
// --no-sign-request sends anonymous requests and loads no credentials. It returns the client
// and the region in use.
func newS3Client(ctx context.Context, o *Options) (*s3.Client, string, error) {
	// The SDK's own warnings (e.g. IMDS fallbacks) would go to stderr unasked; drop them.
	lo := []func(*config.LoadOptions) error{config.WithLogger(logging.Nop{})}
	if o.Profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(o.Profile))
	}
	if o.Region != "" {
		lo = append(lo, config.WithRegion(o.Region))
	}
	if o.NoSignRequest {
		lo = append(lo, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, "", err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.EndpointURL != "" {
			so.BaseEndpoint = aws.String(o.EndpointURL)
		}
		so.UsePathStyle = o.ForcePathStyle
		so.UseAccelerate = o.TransferAcceleration
		if o.DualStack {
			so.EndpointOptions.UseDualStackEndpoint = aws.DualStackEndpointStateEnabled
		}
		if o.UploadChecksums == "off" {
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		}
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return c, cfg.Region, nil
}

// checkBucket performs mount-s3's startup probe: ListObjectsV2 with max-keys 1 under the prefix.
// The error it returns is already in mount-s3's "Caused by" shape and never contains
// credentials.
func (s *s3Store) checkBucket(ctx context.Context, region string) error {
	_, err := s.list(ctx, s.o.Prefix, "/", 1, "")
	if err == nil {
		return nil
	}
	what := "bucket " + s.bucket
	if s.o.Prefix != "" {
		what = fmt.Sprintf("prefix %s of bucket %s", s.o.Prefix, s.bucket)
	}
	return fmt.Errorf("Failed to create S3 client\n\nCaused by:\n    0: initial ListObjectsV2 failed for %s in region %s\n    1: Client error\n    2: %s",
		what, region, describeErr(err))
}

// describeErr renders an SDK error without request details: "Code: message" for service
// errors, the transport error otherwise.
func describeErr(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if m := ae.ErrorMessage(); m != "" {
			return ae.ErrorCode() + ": " + m
		}
		return ae.ErrorCode()
	}
	return err.Error()
}

func (s *s3Store) list(ctx context.Context, prefix, delimiter string, maxKeys int32, token string) (listing, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix)}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	if maxKeys > 0 {
		in.MaxKeys = aws.Int32(maxKeys)
	}
	if token != "" {
		in.ContinuationToken = aws.String(token)
	}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.ListObjectsV2(ctx, in)
	if err != nil {
		return listing{}, err
	}
	var l listing
	for _, o := range out.Contents {
		l.objects = append(l.objects, objInfo{key: aws.ToString(o.Key), size: aws.ToInt64(o.Size), mtime: aws.ToTime(o.LastModified)})
	}
	for _, p := range out.CommonPrefixes {
		l.prefixes = append(l.prefixes, aws.ToString(p.Prefix))
	}
	if aws.ToBool(out.IsTruncated) {
		l.next = aws.ToString(out.NextContinuationToken)
	}
	return l, nil
}

func (s *s3Store) head(ctx context.Context, key string) (objInfo, error) {
	in := &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.HeadObject(ctx, in)
	if err != nil {
		var nf *types.NotFound
		var nsk *types.NoSuchKey
		if errors.As(err, &nf) || errors.As(err, &nsk) {
			return objInfo{}, errNotFound
		}
		return objInfo{}, err
	}
	return objInfo{key: key, size: aws.ToInt64(out.ContentLength), mtime: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key), Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
			return nil, nil // read at or past the end of a shrunken object
		}
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(io.LimitReader(out.Body, n))
}

func (s *s3Store) put(ctx context.Context, key string, body []byte) error {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(key), Body: bytes.NewReader(body)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	if s.o.StorageClass != "" {
		in.StorageClass = types.StorageClass(s.o.StorageClass)
	}
	if s.o.SSE != "" {
		in.ServerSideEncryption = types.ServerSideEncryption(s.o.SSE)
	}
	if s.o.SSEKMSKeyID != "" {
		in.SSEKMSKeyId = aws.String(s.o.SSEKMSKeyID)
	}
	if s.o.UploadChecksums != "off" {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	}
	_, err := s.c.PutObject(ctx, in)
	return err
}

func (s *s3Store) del(ctx context.Context, key string) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(key)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	_, err := s.c.DeleteObject(ctx, in)
	return err
}

// logger writes one line per significant event. It never receives credentials.
type logger struct {
	w     io.Writer // nil: logging disabled (--no-log)
	debug bool
}

func (l *logger) printf(format string, args ...any) {
	if l == nil || l.w == nil {
		return
	}
	fmt.Fprintf(l.w, "%s mount-s3[%d]: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l *logger) debugf(format string, args ...any) {
	if l != nil && l.debug {
		l.printf(format, args...)
	}
}
