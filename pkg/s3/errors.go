package s3

import (
	"context"
	"errors"
	"fmt"
	"net"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// Sentinels wrapped by every error of this package; pkg/driver maps each to one gRPC code.
var (
	// ErrAccessDenied: the store refused the credentials or the operation (AccessDenied,
	// InvalidAccessKeyId, SignatureDoesNotMatch, expired tokens, a request signed for another
	// region, any other 403).
	ErrAccessDenied = errors.New("access denied by the S3 store")
	// ErrUnavailable: a transient failure worth retrying (throttling, 5xx, network and TLS
	// errors, conflicting operations in progress).
	ErrUnavailable = errors.New("the S3 store is unavailable")
	// ErrInvalidBucketName: a bucket name or prefix the store or this package refuses.
	ErrInvalidBucketName = errors.New("invalid bucket name")
	// ErrBucketTaken: the bucket exists and is not the one this volume owns: another account's
	// (BucketAlreadyExists), or one in this account marked for another volume or not made by
	// this driver.
	ErrBucketTaken = errors.New("the bucket name is taken")
	// ErrNoSuchBucket: the bucket does not exist.
	ErrNoSuchBucket = errors.New("the bucket does not exist")
	// ErrBucketNotEmpty: DeleteBucket refused a bucket that still holds objects, object
	// versions or delete markers.
	ErrBucketNotEmpty = errors.New("the bucket is not empty")
	// ErrNotEmptied: EmptyBucket ran out of time with objects left; calling it again resumes.
	ErrNotEmptied = errors.New("the bucket is not empty yet")
)

// S3 error codes by meaning. Stores other than AWS use the same codes (Scality RING, MinIO,
// Ceph RGW, versitygw).
var (
	deniedCodes = map[string]bool{
		"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
		"Forbidden": true, "AllAccessDisabled": true, "InvalidToken": true, "ExpiredToken": true,
		"TokenRefreshRequired": true, "AccountProblem": true, "InvalidSecurity": true,
		"RequestTimeTooSkewed": true, "AuthorizationHeaderMalformed": true,
	}
	transientCodes = map[string]bool{
		"SlowDown": true, "Throttling": true, "ThrottlingException": true, "RequestLimitExceeded": true,
		"ServiceUnavailable": true, "InternalError": true, "RequestTimeout": true,
		"OperationAborted": true,
	}
)

// classify wraps err from an S3 call with the sentinel matching its meaning. Context errors
// are returned as they are (wrapped with op) so the caller sees DeadlineExceeded or Canceled.
func classify(op, bucket string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s %q: %w", op, bucket, err)
	}
	if kind := kindOf(err); kind != nil {
		return fmt.Errorf("%s %q: %w: %w", op, bucket, kind, err)
	}
	return fmt.Errorf("%s %q: %w", op, bucket, err)
}

// kindOf returns the sentinel for err, or nil when err has no specific meaning.
func kindOf(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch code := ae.ErrorCode(); {
		case deniedCodes[code]:
			return ErrAccessDenied
		case transientCodes[code]:
			return ErrUnavailable
		case code == "InvalidBucketName":
			return ErrInvalidBucketName
		case code == "NoSuchBucket":
			return ErrNoSuchBucket
		case code == "BucketNotEmpty":
			return ErrBucketNotEmpty
		case code == "BucketAlreadyExists":
			return ErrBucketTaken
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch status := re.HTTPStatusCode(); {
		case status == 403:
			return ErrAccessDenied
		case status == 429 || status >= 500:
			return ErrUnavailable
		}
	}
	// Connection refused, DNS, timeouts and TLS failures (unknown authority included) all
	// arrive as *url.Error or *net.OpError, both net.Error.
	var ne net.Error
	if errors.As(err, &ne) {
		return ErrUnavailable
	}
	return nil
}

// apiCode returns the S3 error code of err ("" when it has none).
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
