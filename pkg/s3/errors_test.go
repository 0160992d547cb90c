package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestClassify(t *testing.T) {
	httpErr := func(status int, inner error) error {
		return &smithy.OperationError{ServiceID: "S3", OperationName: "CreateBucket", Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: inner},
		}}
	}
	refused := &url.Error{Op: "Put", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}
	tests := []struct {
		name string
		err  error
		want error // nil: no sentinel
	}{
		{"access denied", apiErr("AccessDenied"), ErrAccessDenied},
		{"unknown key", apiErr("InvalidAccessKeyId"), ErrAccessDenied},
		{"bad signature", apiErr("SignatureDoesNotMatch"), ErrAccessDenied},
		{"expired token", apiErr("ExpiredToken"), ErrAccessDenied},
		{"signed for another region", apiErr("AuthorizationHeaderMalformed"), ErrAccessDenied},
		{"bare 403", httpErr(403, errors.New("forbidden")), ErrAccessDenied},
		{"slow down", apiErr("SlowDown"), ErrUnavailable},
		{"throttling", apiErr("Throttling"), ErrUnavailable},
		{"internal error", apiErr("InternalError"), ErrUnavailable},
		{"service unavailable", apiErr("ServiceUnavailable"), ErrUnavailable},
		{"bare 503", httpErr(503, errors.New("unavailable")), ErrUnavailable},
		{"bare 500", httpErr(500, errors.New("boom")), ErrUnavailable},
		{"429", httpErr(429, errors.New("too many")), ErrUnavailable},
		{"connection refused", fmt.Errorf("send: %w", refused), ErrUnavailable},
		{"invalid name", apiErr("InvalidBucketName"), ErrInvalidBucketName},
		{"no such bucket", apiErr("NoSuchBucket"), ErrNoSuchBucket},
		{"not empty", apiErr("BucketNotEmpty"), ErrBucketNotEmpty},
		{"taken", apiErr("BucketAlreadyExists"), ErrBucketTaken},
		{"other api error", apiErr("MalformedXML"), nil},
		{"400 without code", httpErr(400, errors.New("bad")), nil},
		{"plain error", errors.New("boom"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := classify("create bucket", "b", tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("classify lost the original error: %v", got)
			}
			if !strings.HasPrefix(got.Error(), `create bucket "b": `) {
				t.Errorf("message %q does not start with the operation and bucket", got)
			}
			for _, s := range []error{ErrAccessDenied, ErrUnavailable, ErrInvalidBucketName, ErrNoSuchBucket, ErrBucketNotEmpty, ErrBucketTaken} {
				if errors.Is(got, s) != (s == tc.want) {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", got, s, errors.Is(got, s), s == tc.want)
				}
			}
		})
	}
}

func TestClassifyKeepsContextErrors(t *testing.T) {
	for _, ctxErr := range []error{context.DeadlineExceeded, context.Canceled} {
		err := classify("delete bucket", "b", &smithy.OperationError{ServiceID: "S3", Err: fmt.Errorf("canceled: %w", ctxErr)})
		if !errors.Is(err, ctxErr) || errors.Is(err, ErrUnavailable) {
			t.Errorf("classify(%v) = %v: want the context error and no sentinel", ctxErr, err)
		}
	}
	if classify("x", "b", nil) != nil {
		t.Error("classify(nil) is not nil")
	}
}
