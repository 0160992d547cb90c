package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/targetpath"
)

func TestToStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("outer: %w", err) }
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"status passes through", status.Error(codes.NotFound, "x"), codes.NotFound},
		{"deadline", wrap(context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", wrap(context.Canceled), codes.Canceled},
		{"busy", wrap(errBusy), codes.Aborted},
		{"field", invalid("volume_id", "empty"), codes.InvalidArgument},
		{"target path", wrap(targetpath.ErrInvalid), codes.InvalidArgument},
		{"mount option", wrap(&mountargs.Error{Option: "x", Reason: "y"}), codes.InvalidArgument},
		{"credentials", wrap(credentials.ErrInvalid), codes.InvalidArgument},
		{"missing secret", wrap(credentials.ErrMissing), codes.InvalidArgument},
		{"no driver creds", wrap(credentials.ErrNoDriverCredentials), codes.FailedPrecondition},
		{"target in use", wrap(mounter.ErrTargetInUse), codes.AlreadyExists},
		{"unavailable", wrap(mounter.ErrUnavailable), codes.Unavailable},
		{"mount failed", wrap(mounter.ErrMountFailed), codes.Internal},
		{"volume busy", wrap(errVolumeBusy), codes.Aborted},
		{"volume not found", wrap(errVolumeNotFound), codes.NotFound},
		{"not the volume's bucket", wrap(errNotVolumeBucket), codes.FailedPrecondition},
		{"s3 access denied", wrap(s3.ErrAccessDenied), codes.PermissionDenied},
		{"s3 unavailable", wrap(s3.ErrUnavailable), codes.Unavailable},
		{"s3 invalid bucket name", wrap(s3.ErrInvalidBucketName), codes.InvalidArgument},
		{"s3 bucket taken", wrap(s3.ErrBucketTaken), codes.AlreadyExists},
		{"s3 no such bucket", wrap(s3.ErrNoSuchBucket), codes.NotFound},
		{"s3 bucket not empty", wrap(s3.ErrBucketNotEmpty), codes.FailedPrecondition},
		{"s3 not emptied yet", wrap(s3.ErrNotEmptied), codes.Aborted},
		{"s3 deadline", wrap(fmt.Errorf("delete bucket: %w", context.DeadlineExceeded)), codes.DeadlineExceeded},
		{"unknown", errors.New("boom"), codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := toStatus(tc.err)
			if code := status.Code(got); code != tc.want {
				t.Fatalf("code = %v, want %v", code, tc.want)
			}
			if tc.err != nil && status.Convert(got).Message() != tc.err.Error() && status.Convert(tc.err).Code() == codes.Unknown {
				t.Errorf("message %q lost the original %q", status.Convert(got).Message(), tc.err)
			}
		})
	}
}

func TestInvalidNamesField(t *testing.T) {
	err := invalid("volume_context.bucketName", "must be %d-%d characters", 3, 63)
	if got := err.Error(); got != "volume_context.bucketName: invalid argument: must be 3-63 characters" {
		t.Errorf("message = %q", got)
	}
}
