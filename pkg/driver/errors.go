package driver

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
	"github.com/s3csi/s3-csi-driver/pkg/targetpath"
)

// Sentinels of this package; the table in codeOf maps them with every other package's.
var (
	// errInvalidArgument marks request validation failures.
	errInvalidArgument = errors.New("invalid argument")
	// errBusy marks an operation refused because another one holds the same target.
	errBusy = errors.New("an operation on this target is already in progress")
	// errVolumeBusy marks a Controller operation refused because another one holds the same
	// bucket.
	errVolumeBusy = errors.New("an operation on this volume is already in progress")
	// errVolumeNotFound marks a volume id whose bucket does not exist or is not the volume's.
	errVolumeNotFound = errors.New("volume not found")
	// errNotVolumeBucket marks a bucket that exists but is not marked as the bucket of the
	// volume being deleted: it is kept.
	errNotVolumeBucket = errors.New("the bucket is not this volume's")
	// errMountDead marks a volume whose mount-s3 mount is dead (NodeGetVolumeStats).
	errMountDead = errors.New("mount dead")
)

// fieldError names the request field a validation failure is about. Its message always starts
// with the field, e.g. `target_path: invalid target path: "x" is not absolute`.
func fieldError(field string, err error) error {
	return fmt.Errorf("%s: %w", field, err)
}

// invalid returns an InvalidArgument error about field.
func invalid(field, format string, a ...any) error {
	return fieldError(field, fmt.Errorf("%w: %s", errInvalidArgument, fmt.Sprintf(format, a...)))
}

// codeOf maps an error from any layer to the gRPC code the CSI caller gets. It is the only
// place codes are chosen; inner packages return wrapped sentinels.
func codeOf(err error) codes.Code {
	var st interface{ GRPCStatus() *status.Status }
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &st):
		return st.GRPCStatus().Code()
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, errBusy):
		return codes.Aborted
	case errors.Is(err, errInvalidArgument),
		errors.Is(err, targetpath.ErrInvalid),
		errors.Is(err, mountargs.ErrInvalid),
		errors.Is(err, credentials.ErrInvalid),
		errors.Is(err, credentials.ErrMissing),
		errors.Is(err, mounter.ErrInvalidRequest):
		return codes.InvalidArgument
	case errors.Is(err, credentials.ErrNoDriverCredentials):
		return codes.FailedPrecondition
	case errors.Is(err, secretscope.ErrRefused):
		return codes.PermissionDenied
	case errors.Is(err, mounter.ErrTargetInUse):
		return codes.AlreadyExists
	case errors.Is(err, mounter.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, mounter.ErrUnplaceable):
		return codes.ResourceExhausted
	// Dynamic provisioning: the Controller service and pkg/s3.
	case errors.Is(err, errVolumeBusy), errors.Is(err, s3.ErrNotEmptied):
		return codes.Aborted
	case errors.Is(err, s3.ErrInvalidBucketName):
		return codes.InvalidArgument
	case errors.Is(err, errVolumeNotFound), errors.Is(err, s3.ErrNoSuchBucket):
		return codes.NotFound
	case errors.Is(err, s3.ErrBucketTaken):
		return codes.AlreadyExists
	case errors.Is(err, errNotVolumeBucket), errors.Is(err, s3.ErrBucketNotEmpty), errors.Is(err, errMountDead):
		return codes.FailedPrecondition
	case errors.Is(err, s3.ErrAccessDenied):
		return codes.PermissionDenied
	case errors.Is(err, s3.ErrUnavailable):
		return codes.Unavailable
	default:
		return codes.Internal
	}
}

// toStatus converts err into a gRPC status error carrying codeOf(err) and err's message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}
