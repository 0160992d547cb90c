package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/inflight"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
)

// BucketClient is what the Controller service needs from the S3 store, with one set of
// credentials. *s3.Client implements it; see there for the exact semantics of each call.
type BucketClient interface {
	// CreateBucket creates bucket, or finds it already created for owner (idempotent).
	CreateBucket(ctx context.Context, bucket string, owner s3.Owner) (s3.CreateResult, error)
	// BucketOwner returns the volume marked on bucket (zero when unmarked).
	BucketOwner(ctx context.Context, bucket string) (s3.Owner, error)
	// DeleteBucket deletes an empty bucket; a missing bucket is success.
	DeleteBucket(ctx context.Context, bucket string) error
	// EmptyBucket deletes everything in bucket until done or stopAt (then s3.ErrNotEmptied).
	EmptyBucket(ctx context.Context, bucket string, stopAt time.Time) (s3.EmptyResult, error)
}

var _ BucketClient = (*s3.Client)(nil)

// ControllerConfig configures the Controller service.
type ControllerConfig struct {
	// DriverCredentials are the controller's own credentials, used when a request carries no
	// provisioner secret; nil when it has none.
	DriverCredentials *credentials.Credentials
	// EmptyBudget bounds the time one DeleteVolume spends emptying a bucket (policy
	// deleteWithObjects) before it returns Aborted for the provisioner to retry; the request's
	// own deadline shortens it further.
	EmptyBudget time.Duration
	// NewClient returns a client signing with creds in region ("" for the store's default
	// region). main passes (*s3.Store).Client.
	NewClient func(creds credentials.Credentials, region string) BucketClient
}

// ControllerServer implements the CSI Controller service: CreateVolume creates a bucket per
// volume, DeleteVolume deletes it according to the volume's deletion policy, and
// ValidateVolumeCapabilities checks a volume and capabilities against the store.
//
// Every operation is idempotent and keyed on the bucket: a second operation on a bucket while
// one runs in this process gets Aborted (the sidecar retries), and the S3 calls themselves
// converge when several controller replicas race (see s3.Client.CreateBucket).
type ControllerServer struct {
	csi.UnimplementedControllerServer
	cfg      ControllerConfig
	inflight inflight.Set
	metrics  *controllerMetrics
}

// NewControllerServer returns the Controller service.
func NewControllerServer(cfg ControllerConfig) (*ControllerServer, error) {
	if cfg.NewClient == nil {
		return nil, errors.New("controller: a client constructor is required")
	}
	if cfg.EmptyBudget <= 0 {
		return nil, errors.New("controller: the bucket emptying budget must be positive")
	}
	return &ControllerServer{cfg: cfg, metrics: newControllerMetrics()}, nil
}

// Collectors returns the Controller service's Prometheus metrics (docs/monitoring.md), for the
// caller to register: each CreateVolume and DeleteVolume call is counted by result, its error by
// gRPC code, and timed.
func (s *ControllerServer) Collectors() []prometheus.Collector { return s.metrics.collectors() }

// ControllerGetCapabilities advertises CREATE_DELETE_VOLUME only: buckets need no attach step,
// have no capacity to report, expand or snapshot. SINGLE_NODE_MULTI_WRITER is not advertised
// (see NodeGetCapabilities), so Kubernetes asks for ReadWriteOnce and ReadWriteOncePod as
// SINGLE_NODE_WRITER, which is accepted like every other filesystem mode (accessMode).
func (s *ControllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

// CreateVolume creates the bucket of volume req.Name (see s3.BucketName) and marks it with the
// volume's name and id. A retry with the same name and parameters returns the same volume and
// never makes a second bucket. A bucket that exists but is not this volume's is AlreadyExists.
//
// The volume context tells the node plugin the bucket and where its credentials come from:
// authenticationSource "secret" when the request carried a provisioner secret (the
// StorageClass must then also name a node-publish secret), else "driver". The capacity is 0
// (unknown): S3 buckets have none, and the external-provisioner then records the claim's size.
func (s *ControllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	start := time.Now()
	resp, result, err := s.createVolume(ctx, req)
	s.metrics.observe(opCreate, start, string(result), err)
	return resp, err
}

func (s *ControllerServer) createVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, s3.CreateResult, error) {
	name := req.GetName()
	if err := validateVolumeName(name); err != nil {
		return nil, "", err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, "", err
	}
	params, err := parseParameters(req.GetParameters())
	if err != nil {
		return nil, "", err
	}
	if len(req.GetMutableParameters()) > 0 {
		return nil, "", invalid("mutable_parameters", "are not supported: volumes of this driver have no modifiable attributes")
	}
	if req.GetVolumeContentSource() != nil {
		return nil, "", invalid("volume_content_source", "snapshots and clones are not supported")
	}
	if err := checkCapacity(req.GetCapacityRange()); err != nil {
		return nil, "", err
	}
	client, source, err := s.client(req.GetSecrets())
	if err != nil {
		return nil, "", err
	}
	bucket, err := s3.BucketName(params.prefix, name)
	if err != nil {
		return nil, "", fieldError("name", err)
	}
	id := volumeID{policy: params.policy, bucket: bucket}
	release, ok := s.inflight.TryAcquire(bucket)
	if !ok {
		return nil, "", fieldError("name", fmt.Errorf("%w: bucket %s", errVolumeBusy, bucket))
	}
	defer release()
	result, err := client.CreateBucket(ctx, bucket, s3.Owner{VolumeName: name, VolumeID: id.String()})
	if err != nil {
		return nil, "", fmt.Errorf("create volume %q: %w", name, err)
	}
	klog.V(2).InfoS("Volume provisioned", "volumeName", name, "volumeID", id, "bucket", bucket, "result", result, "authenticationSource", source)
	vc := map[string]string{ctxBucketName: bucket, ctxAuthSource: string(source)}
	if params.recovery != "" {
		vc[ctxRecovery] = params.recovery
	}
	for k, v := range params.resources {
		vc[k] = v
	}
	if params.secretScope != "" {
		vc[secretscope.Attribute] = params.secretScope
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: 0,
		VolumeContext: vc,
	}}, result, nil
}

// DeleteVolume deletes the bucket of a dynamically provisioned volume, as its deletion policy
// (recorded in the volume id) says:
//   - retain: nothing is touched;
//   - delete: the bucket is deleted if empty; otherwise FailedPrecondition, bucket kept;
//   - deleteWithObjects: everything in the bucket is deleted for at most the emptying budget,
//     then the bucket; when time runs out, Aborted — the provisioner retries and the emptying
//     carries on.
//
// Success means the bucket is gone (or retained): a bucket that no longer exists, and an id
// this controller never creates (a static volume's handle), are success. A bucket that exists
// but is not marked as this volume's is never deleted: FailedPrecondition. The volumes of
// Scality's 1.x driver (id csi-s3-<uuid>) get what 1.x's StorageClass promised
// (deleteLegacyBucket).
func (s *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	start := time.Now()
	result, err := s.deleteVolume(ctx, req)
	s.metrics.observe(opDelete, start, result, err)
	if err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteVolume is DeleteVolume; it returns what it did (resultDeleted, resultRetained or
// resultAbsent).
func (s *ControllerServer) deleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (string, error) {
	if err := validateText("volume_id", req.GetVolumeId(), maxVolumeID); err != nil {
		return "", err
	}
	id, err := parseVolumeID("volume_id", req.GetVolumeId())
	if bucket, ok := legacyDynamicBucket(req.GetVolumeId()); ok && errors.Is(err, errForeignVolumeID) {
		return s.deleteLegacyBucket(ctx, req.GetSecrets(), bucket)
	}
	if errors.Is(err, errForeignVolumeID) {
		klog.V(2).InfoS("Nothing to delete: not a dynamically provisioned volume", "volumeID", req.GetVolumeId())
		return resultAbsent, nil
	}
	if err != nil {
		return "", err
	}
	if id.policy == policyRetain {
		klog.V(2).InfoS("Keeping the bucket of a deleted volume (bucketDeletionPolicy retain)", "volumeID", id, "bucket", id.bucket)
		return resultRetained, nil
	}
	client, _, err := s.client(req.GetSecrets())
	if err != nil {
		return "", err
	}
	release, ok := s.inflight.TryAcquire(id.bucket)
	if !ok {
		return "", fieldError("volume_id", fmt.Errorf("%w: bucket %s", errVolumeBusy, id.bucket))
	}
	defer release()
	owner, err := client.BucketOwner(ctx, id.bucket)
	if errors.Is(err, s3.ErrNoSuchBucket) {
		klog.V(2).InfoS("Bucket already deleted", "volumeID", id, "bucket", id.bucket)
		return resultAbsent, nil
	}
	if err != nil {
		return "", fmt.Errorf("delete volume %q: %w", id, err)
	}
	if owner.VolumeID != id.String() {
		return "", fmt.Errorf("delete volume %q: %w: bucket %q exists but its %s tag is %q, not this volume id, so it is not deleted; delete it by hand if it is no longer needed, or restore the tag",
			id, errNotVolumeBucket, id.bucket, s3.TagVolumeID, owner.VolumeID)
	}
	if id.policy == policyDeleteWithObjects {
		res, err := client.EmptyBucket(ctx, id.bucket, s.emptyDeadline(ctx))
		klog.V(2).InfoS("Emptying bucket of a deleted volume (bucketDeletionPolicy deleteWithObjects)", "volumeID", id, "bucket", id.bucket, "deletedObjects", res.Objects, "abortedUploads", res.Uploads, "done", err == nil)
		if err != nil {
			return "", fmt.Errorf("delete volume %q: %w", id, err)
		}
	}
	err = client.DeleteBucket(ctx, id.bucket)
	switch {
	case errors.Is(err, s3.ErrBucketNotEmpty) && id.policy == policyDelete:
		return "", fmt.Errorf("delete volume %q: bucket %q still holds objects (or object versions, or incomplete uploads) and the volume's bucketDeletionPolicy is delete, which never deletes data; "+
			"the bucket is kept. Empty it and the deletion succeeds on the provisioner's next retry, or, to keep the data, set the PersistentVolume's persistentVolumeReclaimPolicy to Retain and delete the PersistentVolume: %w", id, id.bucket, err)
	case errors.Is(err, s3.ErrBucketNotEmpty):
		return "", fmt.Errorf("delete volume %q: %w: bucket %q received new objects while it was being emptied; the provisioner's next retry continues", id, s3.ErrNotEmptied, id.bucket)
	case err != nil:
		return "", fmt.Errorf("delete volume %q: %w", id, err)
	}
	klog.V(2).InfoS("Deleted the bucket of a deleted volume", "volumeID", id, "bucket", id.bucket, "policy", id.policy)
	return resultDeleted, nil
}

// ValidateVolumeCapabilities confirms the capabilities (and the volume context and parameters,
// when given) if the volume exists — its bucket exists and is marked with this volume id — and
// every capability is a multi-node filesystem one. Unsupported values are reported in Message,
// not as errors; an unknown volume is NotFound.
func (s *ControllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := validateText("volume_id", req.GetVolumeId(), maxVolumeID); err != nil {
		return nil, err
	}
	caps := req.GetVolumeCapabilities()
	if len(caps) == 0 {
		return nil, invalid("volume_capabilities", "at least one capability is required")
	}
	for i, c := range caps {
		if c == nil || c.GetAccessMode() == nil || (c.GetMount() == nil && c.GetBlock() == nil) {
			return nil, invalid(fmt.Sprintf("volume_capabilities[%d]", i), "needs an access type and an access mode")
		}
	}
	id, err := parseVolumeID("volume_id", req.GetVolumeId())
	if errors.Is(err, errForeignVolumeID) {
		return nil, fieldError("volume_id", fmt.Errorf("%w: %w", errVolumeNotFound, err))
	}
	if err != nil {
		return nil, err
	}
	client, _, err := s.client(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	owner, err := client.BucketOwner(ctx, id.bucket)
	switch {
	case errors.Is(err, s3.ErrNoSuchBucket):
		return nil, fieldError("volume_id", fmt.Errorf("%w: bucket %q does not exist", errVolumeNotFound, id.bucket))
	case err != nil:
		return nil, fmt.Errorf("validate volume %q: %w", id, err)
	case owner.VolumeID != id.String():
		return nil, fieldError("volume_id", fmt.Errorf("%w: bucket %q is not marked as this volume's bucket", errVolumeNotFound, id.bucket))
	}
	if reason := unsupported(id, req); reason != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: reason}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: caps,
		Parameters:         req.GetParameters(),
	}}, nil
}

// unsupported explains why the request's capabilities, context or parameters do not fit the
// volume ("" when they do).
func unsupported(id volumeID, req *csi.ValidateVolumeCapabilitiesRequest) string {
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return err.Error()
	}
	if b, ok := req.GetVolumeContext()[ctxBucketName]; ok && b != id.bucket {
		return fmt.Sprintf("volume_context.%s %q is not the volume's bucket %q", ctxBucketName, b, id.bucket)
	}
	if len(req.GetMutableParameters()) > 0 {
		return "mutable_parameters are not supported"
	}
	if len(req.GetParameters()) > 0 {
		p, err := parseParameters(req.GetParameters())
		if err != nil {
			return err.Error()
		}
		if p.policy != id.policy {
			return fmt.Sprintf("parameters.%s %q differs from the volume's %q", paramDeletionPolicy, p.policy, id.policy)
		}
	}
	return ""
}

// checkCapabilities requires at least one capability, each a filesystem (mount) capability in
// a multi-node access mode — the node plugin's own rules (accessMode).
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return invalid("volume_capabilities", "at least one capability is required")
	}
	for i, c := range caps {
		if _, err := accessMode(c); err != nil {
			return fieldError(fmt.Sprintf("volume_capabilities[%d]", i), err)
		}
	}
	return nil
}

// checkCapacity accepts any sane range: buckets have no size, so nothing is out of range.
func checkCapacity(r *csi.CapacityRange) error {
	switch {
	case r == nil:
		return nil
	case r.GetRequiredBytes() < 0 || r.GetLimitBytes() < 0:
		return invalid("capacity_range", "must not be negative")
	case r.GetLimitBytes() > 0 && r.GetLimitBytes() < r.GetRequiredBytes():
		return invalid("capacity_range", "limit_bytes %d is below required_bytes %d", r.GetLimitBytes(), r.GetRequiredBytes())
	}
	return nil
}

// client returns a bucket client for the request's provisioner secret, or for the controller's
// own credentials when the request has none, with the matching authentication source.
func (s *ControllerServer) client(secrets map[string]string) (BucketClient, credentials.Source, error) {
	if len(secrets) == 0 {
		if s.cfg.DriverCredentials == nil {
			return nil, "", fieldError("secrets", fmt.Errorf("%w: the request has no provisioner secret and the controller has no credentials of its own; "+
				"set csi.storage.k8s.io/provisioner-secret-name and -namespace in the StorageClass, or give the controller AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", credentials.ErrNoDriverCredentials))
		}
		return s.cfg.NewClient(*s.cfg.DriverCredentials, ""), credentials.SourceDriver, nil
	}
	creds, err := credentials.FromSecrets(secrets, secretRegion)
	if err != nil {
		return nil, "", fieldError("secrets", fmt.Errorf("provisioner secret: %w", err))
	}
	region, ok := secrets[secretRegion]
	if ok {
		if err := validateRegion(region); err != nil {
			return nil, "", err
		}
	}
	return s.cfg.NewClient(creds, region), credentials.SourceSecret, nil
}

// emptyDeadline is when EmptyBucket must stop starting new pages: after the budget, and early
// enough in the request's own deadline to leave a fifth of it for the last page and
// DeleteBucket.
func (s *ControllerServer) emptyDeadline(ctx context.Context) time.Time {
	now := time.Now()
	stop := now.Add(s.cfg.EmptyBudget)
	if dl, ok := ctx.Deadline(); ok {
		if limit := dl.Add(-dl.Sub(now) / 5); limit.Before(stop) {
			stop = limit
		}
	}
	return stop
}
