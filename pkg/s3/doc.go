// Package s3 owns the buckets the CSI controller provisions on an S3-compatible store (Scality
// RING S3, AWS S3, ...): how the controller reaches the store (an explicit aws-sdk-go-v2
// configuration: endpoint, path-style addressing, region, static credentials, extra CA
// certificates — nothing is read from the environment), how a bucket name is derived from a CSI
// volume name, how a bucket is marked as the bucket of one volume (two bucket tags), and the
// bucket operations dynamic provisioning needs: create idempotently, read the mark, delete, and
// empty in bounded, resumable steps.
//
// Every error wraps one of the exported sentinels (ErrAccessDenied, ErrUnavailable, ...) next to
// the SDK's own error, so the CSI boundary can choose a gRPC code without knowing S3 error codes.
package s3
