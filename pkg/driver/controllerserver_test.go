package driver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
)

// fakeBuckets is a BucketClient recording calls; the per-call hooks return canned answers.
type fakeBuckets struct {
	mu     sync.Mutex
	calls  []string
	owner  s3.Owner
	errs   map[string]error          // by method name
	create func(ctx context.Context) // runs inside CreateBucket (to block it)
	result s3.CreateResult           // CreateBucket's result; empty: s3.Created
}

func (f *fakeBuckets) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.errs[call]
}

func (f *fakeBuckets) CreateBucket(ctx context.Context, bucket string, owner s3.Owner) (s3.CreateResult, error) {
	if f.create != nil {
		f.create(ctx)
	}
	if err := f.record("CreateBucket"); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.owner = owner
	f.mu.Unlock()
	if f.result != "" {
		return f.result, nil
	}
	return s3.Created, nil
}

func (f *fakeBuckets) BucketOwner(context.Context, string) (s3.Owner, error) {
	err := f.record("BucketOwner")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner, err
}

func (f *fakeBuckets) DeleteBucket(context.Context, string) error { return f.record("DeleteBucket") }

func (f *fakeBuckets) EmptyBucket(context.Context, string, time.Time) (s3.EmptyResult, error) {
	return s3.EmptyResult{Objects: 3}, f.record("EmptyBucket")
}

func (f *fakeBuckets) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// newTestController returns a controller whose clients are fake, recording the credentials
// and region each client was made for.
func newTestController(t *testing.T, ctrlCreds *credentials.Credentials) (*ControllerServer, *fakeBuckets, *[]string) {
	t.Helper()
	fake := &fakeBuckets{errs: map[string]error{}}
	var made []string
	cs, err := NewControllerServer(ControllerConfig{
		DriverCredentials: ctrlCreds,
		EmptyBudget:       time.Minute,
		NewClient: func(c credentials.Credentials, region string) BucketClient {
			made = append(made, c.AccessKeyID+"@"+region)
			return fake
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cs, fake, &made
}

var (
	ctrlCreds   = &credentials.Credentials{AccessKeyID: "DRIVER", SecretAccessKey: "driversecret"}
	secretCreds = map[string]string{"access_key_id": "SECRET", "secret_access_key": "s3cr3t", "region": "eu-west-3"}
	rwx         = []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
)

func TestCreateVolumeResponse(t *testing.T) {
	tests := []struct {
		name     string
		driver   *credentials.Credentials
		req      *csi.CreateVolumeRequest
		want     *csi.Volume
		wantMade []string
	}{
		{
			name:   "driver credentials",
			driver: ctrlCreds,
			req:    &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 30}},
			want: &csi.Volume{VolumeId: "v1:delete:pvc-1", VolumeContext: map[string]string{
				"bucketName": "pvc-1", "authenticationSource": "driver",
			}},
			wantMade: []string{"DRIVER@"},
		},
		{
			name:   "provisioner secret with region, prefix and policy",
			driver: ctrlCreds,
			req: &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, Secrets: secretCreds,
				Parameters: map[string]string{"bucketNamePrefix": "team-", "bucketDeletionPolicy": "retain"}},
			want: &csi.Volume{VolumeId: "v1:retain:team-pvc-1", VolumeContext: map[string]string{
				"bucketName": "team-pvc-1", "authenticationSource": "secret",
			}},
			wantMade: []string{"SECRET@eu-west-3"},
		},
		{
			name:   "recovery policy, secret scope and mount-s3 resources go into the volume context",
			driver: ctrlCreds,
			req: &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx,
				Parameters: map[string]string{"mountRecovery": "restart-pod", "nodePublishSecretScope": "any", "mountpointMemoryLimit": "1Gi"}},
			want: &csi.Volume{VolumeId: "v1:delete:pvc-1", VolumeContext: map[string]string{
				"bucketName": "pvc-1", "authenticationSource": "driver", "mountRecovery": "restart-pod", "nodePublishSecretScope": "any", "mountpointMemoryLimit": "1Gi",
			}},
			wantMade: []string{"DRIVER@"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs, fake, made := newTestController(t, tc.driver)
			resp, err := cs.CreateVolume(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, resp.GetVolume(), protocmp.Transform()); d != "" {
				t.Errorf("volume (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantMade, *made); d != "" {
				t.Errorf("clients made (-want +got):\n%s", d)
			}
			if got := fake.owner; got.VolumeName != tc.req.Name || got.VolumeID != tc.want.VolumeId {
				t.Errorf("bucket marked for %+v", got)
			}
		})
	}
}

func TestCreateVolumeRefusals(t *testing.T) {
	long := strings.Repeat("n", 129)
	sn := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER},
	}}
	block := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
	tests := []struct {
		name     string
		driver   *credentials.Credentials
		req      *csi.CreateVolumeRequest
		code     codes.Code
		msgStart string
	}{
		{"no name", ctrlCreds, &csi.CreateVolumeRequest{VolumeCapabilities: rwx}, codes.InvalidArgument, "name: "},
		{"long name", ctrlCreds, &csi.CreateVolumeRequest{Name: long, VolumeCapabilities: rwx}, codes.InvalidArgument, "name: "},
		{"no capabilities", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1"}, codes.InvalidArgument, "volume_capabilities: "},
		{"multi node single writer", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: append(rwx, sn...)}, codes.InvalidArgument, "volume_capabilities[1]: volume_capability.access_mode: "},
		{"block", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: block}, codes.InvalidArgument, "volume_capabilities[0]: volume_capability.access_type: "},
		{"unknown parameter", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, Parameters: map[string]string{"foo": "bar"}}, codes.InvalidArgument, "parameters: "},
		{"mutable parameters", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, MutableParameters: map[string]string{"a": "b"}}, codes.InvalidArgument, "mutable_parameters: "},
		{"content source", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, VolumeContentSource: &csi.VolumeContentSource{}}, codes.InvalidArgument, "volume_content_source: "},
		{"negative capacity", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, CapacityRange: &csi.CapacityRange{RequiredBytes: -1}}, codes.InvalidArgument, "capacity_range: "},
		{"limit below required", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, CapacityRange: &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}}, codes.InvalidArgument, "capacity_range: "},
		{"secret with unknown key", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, Secrets: map[string]string{"access_key_id": "A", "secret_access_key": "S", "secret_key": "x"}}, codes.InvalidArgument, "secrets: "},
		{"secret without secret key", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, Secrets: map[string]string{"access_key_id": "A"}}, codes.InvalidArgument, "secrets: "},
		{"secret with bad region", ctrlCreds, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx, Secrets: map[string]string{"access_key_id": "A", "secret_access_key": "S", "region": "us east"}}, codes.InvalidArgument, "secrets: "},
		{"no credentials at all", nil, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx}, codes.FailedPrecondition, "secrets: "},
		{"name that derives no bucket", ctrlCreds, &csi.CreateVolumeRequest{Name: "sthree-x", VolumeCapabilities: rwx}, codes.InvalidArgument, "name: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs, fake, _ := newTestController(t, tc.driver)
			_, err := cs.CreateVolume(context.Background(), tc.req)
			if c := codeOf(err); c != tc.code {
				t.Fatalf("code = %v (%v), want %v", c, err, tc.code)
			}
			if !strings.HasPrefix(err.Error(), tc.msgStart) {
				t.Errorf("message %q does not start with %q", err, tc.msgStart)
			}
			if calls := fake.callList(); len(calls) != 0 {
				t.Errorf("S3 was called: %v", calls)
			}
		})
	}
}

func TestCreateVolumeBusy(t *testing.T) {
	cs, fake, _ := newTestController(t, ctrlCreds)
	// Only the first CreateBucket blocks; entered is buffered so the signal
	// cannot be lost when that call runs before the test waits for it.
	entered, unblock := make(chan struct{}, 1), make(chan struct{})
	var first sync.Once
	fake.create = func(context.Context) {
		first.Do(func() {
			entered <- struct{}{}
			<-unblock
		})
	}
	req := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx}
	done := make(chan error)
	go func() { _, err := cs.CreateVolume(context.Background(), req); done <- err }()
	<-entered
	if _, err := cs.CreateVolume(context.Background(), req); codeOf(err) != codes.Aborted {
		t.Errorf("concurrent CreateVolume: %v, want Aborted", err)
	}
	// A delete of the same bucket waits for the create too.
	if _, err := cs.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "v1:delete:pvc-1"}); codeOf(err) != codes.Aborted {
		t.Errorf("concurrent DeleteVolume: %v, want Aborted", err)
	}
	close(unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CreateVolume(context.Background(), req); err != nil {
		t.Errorf("CreateVolume after the first finished: %v", err)
	}
}

func TestDeleteVolume(t *testing.T) {
	mine := func(id string) s3.Owner { return s3.Owner{VolumeName: "pvc-1", VolumeID: id} }
	tests := []struct {
		name      string
		id        string
		owner     s3.Owner
		errs      map[string]error
		code      codes.Code
		wantCalls []string
	}{
		{name: "delete", id: "v1:delete:pvc-1", owner: mine("v1:delete:pvc-1"), wantCalls: []string{"BucketOwner", "DeleteBucket"}},
		{name: "delete, not empty", id: "v1:delete:pvc-1", owner: mine("v1:delete:pvc-1"),
			errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrBucketNotEmpty)}, code: codes.FailedPrecondition, wantCalls: []string{"BucketOwner", "DeleteBucket"}},
		{name: "deleteWithObjects", id: "v1:deleteWithObjects:pvc-1", owner: mine("v1:deleteWithObjects:pvc-1"), wantCalls: []string{"BucketOwner", "EmptyBucket", "DeleteBucket"}},
		{name: "deleteWithObjects out of time", id: "v1:deleteWithObjects:pvc-1", owner: mine("v1:deleteWithObjects:pvc-1"),
			errs: map[string]error{"EmptyBucket": fmt.Errorf("x: %w", s3.ErrNotEmptied)}, code: codes.Aborted, wantCalls: []string{"BucketOwner", "EmptyBucket"}},
		{name: "deleteWithObjects, objects written meanwhile", id: "v1:deleteWithObjects:pvc-1", owner: mine("v1:deleteWithObjects:pvc-1"),
			errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrBucketNotEmpty)}, code: codes.Aborted, wantCalls: []string{"BucketOwner", "EmptyBucket", "DeleteBucket"}},
		{name: "retain touches nothing", id: "v1:retain:pvc-1"},
		{name: "foreign id touches nothing", id: "my-static-bucket"},
		{name: "1.x volume: empty bucket deleted", id: legacy1x, wantCalls: []string{"DeleteBucket"}},
		{name: "1.x volume: bucket already gone", id: legacy1x, errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrNoSuchBucket)}, wantCalls: []string{"DeleteBucket"}},
		{name: "1.x volume: bucket with objects kept", id: legacy1x,
			errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrBucketNotEmpty)}, code: codes.FailedPrecondition, wantCalls: []string{"DeleteBucket"}},
		{name: "1.x volume: access denied", id: legacy1x, errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrAccessDenied)}, code: codes.PermissionDenied, wantCalls: []string{"DeleteBucket"}},
		{name: "1.x-like id that is not a v4 UUID touches nothing", id: "csi-s3-2b7f1c3e-9d4a-1e6b-8c2d-5f0a3b9e7d11"},
		{name: "1.x-like id in upper case touches nothing", id: "csi-s3-2B7F1C3E-9D4A-4E6B-8C2D-5F0A3B9E7D11"},
		{name: "csi-sanity's invalid id", id: "fake-vol-id"},
		{name: "bucket already gone", id: "v1:delete:pvc-1", errs: map[string]error{"BucketOwner": fmt.Errorf("x: %w", s3.ErrNoSuchBucket)}, wantCalls: []string{"BucketOwner"}},
		{name: "bucket of someone else kept", id: "v1:delete:pvc-1", owner: mine("v1:retain:pvc-1"), code: codes.FailedPrecondition, wantCalls: []string{"BucketOwner"}},
		{name: "untagged bucket kept", id: "v1:deleteWithObjects:pvc-1", code: codes.FailedPrecondition, wantCalls: []string{"BucketOwner"}},
		{name: "access denied", id: "v1:delete:pvc-1", errs: map[string]error{"BucketOwner": fmt.Errorf("x: %w", s3.ErrAccessDenied)}, code: codes.PermissionDenied, wantCalls: []string{"BucketOwner"}},
		{name: "unsupported version", id: "v2:delete:pvc-1", code: codes.InvalidArgument},
		{name: "malformed v1", id: "v1:nuke:pvc-1", code: codes.InvalidArgument},
		{name: "empty id", id: "", code: codes.InvalidArgument},
		{name: "control characters", id: "v1:delete:pvc-1\n", code: codes.InvalidArgument},
		{name: "huge id", id: strings.Repeat("v", 2000), code: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs, fake, _ := newTestController(t, ctrlCreds)
			fake.owner, fake.errs = tc.owner, tc.errs
			_, err := cs.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: tc.id})
			if c := codeOf(err); c != tc.code {
				t.Fatalf("code = %v (%v), want %v", c, err, tc.code)
			}
			if d := cmp.Diff(tc.wantCalls, fake.callList()); d != "" {
				t.Errorf("S3 calls (-want +got):\n%s", d)
			}
		})
	}
}

// legacy1x is a volume id (and bucket) of Scality's 1.x dynamic provisioning.
const legacy1x = "csi-s3-2b7f1c3e-9d4a-4e6b-8c2d-5f0a3b9e7d11"

func TestDeleteVolumeOf1xNotEmptyMessage(t *testing.T) {
	cs, fake, _ := newTestController(t, ctrlCreds)
	fake.errs = map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrBucketNotEmpty)}
	_, err := cs.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: legacy1x})
	for _, want := range []string{"provisioned by Scality's 1.x driver", `bucket "` + legacy1x + `" still holds objects`, "the bucket is kept", "persistentVolumeReclaimPolicy to Retain"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("message %v does not say %q", err, want)
		}
	}
}

func TestDeleteVolumeNotEmptyMessage(t *testing.T) {
	cs, fake, _ := newTestController(t, ctrlCreds)
	fake.owner = s3.Owner{VolumeName: "pvc-1", VolumeID: "v1:delete:pvc-1"}
	fake.errs = map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrBucketNotEmpty)}
	_, err := cs.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "v1:delete:pvc-1"})
	for _, want := range []string{`bucket "pvc-1" still holds objects`, "bucketDeletionPolicy is delete", "the bucket is kept", "persistentVolumeReclaimPolicy to Retain"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
}

func TestEmptyDeadline(t *testing.T) {
	cs, _, _ := newTestController(t, ctrlCreds)
	cs.cfg.EmptyBudget = time.Minute
	now := time.Now()
	if got := cs.emptyDeadline(context.Background()); got.Sub(now) < 59*time.Second || got.Sub(now) > 61*time.Second {
		t.Errorf("without a request deadline: %v from now, want the budget", got.Sub(now))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got := cs.emptyDeadline(ctx); got.Sub(now) > 8100*time.Millisecond || got.Sub(now) < 7*time.Second {
		t.Errorf("with a 10s request deadline: %v from now, want about 8s", got.Sub(now))
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	mode := func(m csi.VolumeCapability_AccessMode_Mode) []*csi.VolumeCapability {
		return []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		}}
	}
	mine := s3.Owner{VolumeName: "pvc-1", VolumeID: "v1:delete:pvc-1"}
	tests := []struct {
		name      string
		req       *csi.ValidateVolumeCapabilitiesRequest
		owner     s3.Owner
		errs      map[string]error
		code      codes.Code
		confirmed bool
	}{
		{name: "confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx,
			VolumeContext: map[string]string{"bucketName": "pvc-1"}, Parameters: map[string]string{"bucketDeletionPolicy": "delete"}}, owner: mine, confirmed: true},
		{name: "single node writer confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1",
			VolumeCapabilities: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, owner: mine, confirmed: true},
		{name: "single node reader confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1",
			VolumeCapabilities: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, owner: mine, confirmed: true},
		{name: "single node single writer confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1",
			VolumeCapabilities: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)}, owner: mine, confirmed: true},
		{name: "single node multi writer confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1",
			VolumeCapabilities: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)}, owner: mine, confirmed: true},
		{name: "multi node single writer not confirmed", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1",
			VolumeCapabilities: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}, owner: mine},
		{name: "other bucket in context", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx,
			VolumeContext: map[string]string{"bucketName": "other"}}, owner: mine},
		{name: "other policy", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx,
			Parameters: map[string]string{"bucketDeletionPolicy": "retain"}}, owner: mine},
		{name: "unknown parameter", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx,
			Parameters: map[string]string{"foo": "bar"}}, owner: mine},
		{name: "no capabilities", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1"}, code: codes.InvalidArgument},
		{name: "nil capability", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: []*csi.VolumeCapability{nil}}, code: codes.InvalidArgument},
		{name: "no id", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: rwx}, code: codes.InvalidArgument},
		{name: "foreign id", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "fake-vol-id-123", VolumeCapabilities: rwx}, code: codes.NotFound},
		{name: "missing bucket", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx},
			errs: map[string]error{"BucketOwner": fmt.Errorf("x: %w", s3.ErrNoSuchBucket)}, code: codes.NotFound},
		{name: "bucket not marked for the volume", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:pvc-1", VolumeCapabilities: rwx}, code: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs, fake, _ := newTestController(t, ctrlCreds)
			fake.owner, fake.errs = tc.owner, tc.errs
			resp, err := cs.ValidateVolumeCapabilities(context.Background(), tc.req)
			if c := codeOf(err); c != tc.code {
				t.Fatalf("code = %v (%v), want %v", c, err, tc.code)
			}
			if err != nil {
				return
			}
			if got := resp.GetConfirmed() != nil; got != tc.confirmed {
				t.Fatalf("confirmed = %v (message %q), want %v", got, resp.GetMessage(), tc.confirmed)
			}
			if !tc.confirmed && resp.GetMessage() == "" {
				t.Error("an unconfirmed answer has no message")
			}
		})
	}
}

func TestControllerGetCapabilities(t *testing.T) {
	cs, _, _ := newTestController(t, ctrlCreds)
	resp, err := cs.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.ControllerServiceCapability_RPC_Type
	for _, c := range resp.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	if d := cmp.Diff([]csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}, got); d != "" {
		t.Errorf("capabilities (-want +got):\n%s", d)
	}
}
