package driver

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/pkg/s3"
)

func TestParseParameters(t *testing.T) {
	many := map[string]string{}
	for i := range maxParams + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name    string
		params  map[string]string
		want    volumeParams
		wantErr string // prefix of the message; "" means success
	}{
		{"none", nil, volumeParams{policy: policyDelete}, ""},
		{"all", map[string]string{paramBucketNamePrefix: "team-a-", paramDeletionPolicy: "deleteWithObjects"}, volumeParams{prefix: "team-a-", policy: policyDeleteWithObjects}, ""},
		{"retain", map[string]string{paramDeletionPolicy: "retain"}, volumeParams{policy: policyRetain}, ""},
		{"recovery restart-pod", map[string]string{ctxRecovery: "restart-pod"}, volumeParams{policy: policyDelete, recovery: "restart-pod"}, ""},
		{"recovery repair", map[string]string{ctxRecovery: "repair"}, volumeParams{policy: policyDelete, recovery: "repair"}, ""},
		{"recovery unknown", map[string]string{ctxRecovery: "reboot"}, volumeParams{}, `parameters.mountRecovery: invalid argument: "reboot" is not a recovery policy`},
		{"provisioner metadata", map[string]string{
			"csi.storage.k8s.io/pv/name": "pvc-1", "csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "ns",
		}, volumeParams{policy: policyDelete}, ""},
		{"empty prefix", map[string]string{paramBucketNamePrefix: ""}, volumeParams{policy: policyDelete}, ""},
		{"unknown keys named", map[string]string{"bucketName": "x", "mounter": "y", paramDeletionPolicy: "delete"}, volumeParams{}, `parameters: invalid argument: unknown keys ["bucketName" "mounter"]`},
		{"other reserved key", map[string]string{"csi.storage.k8s.io/fstype": "ext4"}, volumeParams{}, `parameters: invalid argument: unknown keys ["csi.storage.k8s.io/fstype"]`},
		{"policy case matters", map[string]string{paramDeletionPolicy: "Delete"}, volumeParams{}, `parameters.bucketDeletionPolicy: invalid argument: "Delete" is not one of`},
		{"empty policy", map[string]string{paramDeletionPolicy: ""}, volumeParams{}, "parameters.bucketDeletionPolicy: invalid argument: is empty"},
		{"prefix upper case", map[string]string{paramBucketNamePrefix: "Team"}, volumeParams{}, "parameters.bucketNamePrefix: invalid bucket name"},
		{"prefix with dot", map[string]string{paramBucketNamePrefix: "team.a"}, volumeParams{}, "parameters.bucketNamePrefix: invalid bucket name"},
		{"prefix too long", map[string]string{paramBucketNamePrefix: strings.Repeat("a", 33)}, volumeParams{}, "parameters.bucketNamePrefix: invalid bucket name"},
		{"secret scope", map[string]string{"nodePublishSecretScope": "claim"}, volumeParams{policy: policyDelete, secretScope: "claim"}, ""},
		{"bad secret scope", map[string]string{"nodePublishSecretScope": "everywhere"}, volumeParams{}, `parameters.nodePublishSecretScope: invalid argument: "everywhere" is not a secret scope: use claim`},
		{"mount-s3 resources", map[string]string{"mountpointMemoryRequest": "256Mi", "mountpointMemoryLimit": "1Gi"},
			volumeParams{policy: policyDelete, resources: map[string]string{"mountpointMemoryRequest": "256Mi", "mountpointMemoryLimit": "1Gi"}}, ""},
		{"resource not a quantity", map[string]string{"mountpointCPULimit": "two"}, volumeParams{}, `invalid argument: parameters.mountpointCPULimit: "two" is not a Kubernetes quantity`},
		{"resource request above limit", map[string]string{"mountpointMemoryRequest": "2Gi", "mountpointMemoryLimit": "1Gi"}, volumeParams{}, "parameters: invalid argument: the memory request 2Gi is above its limit 1Gi"},
		{"too many keys", many, volumeParams{}, "parameters: invalid argument: has 33 keys"},
		{"oversized value", map[string]string{paramBucketNamePrefix: strings.Repeat("a", 1<<20)}, volumeParams{}, "parameters.bucketNamePrefix: invalid argument: is longer than 1024 bytes"},
		{"oversized key", map[string]string{strings.Repeat("k", 300): "v"}, volumeParams{}, "parameters key: invalid argument: is longer than 256 bytes"},
		{"control character in key", map[string]string{"a\nb": "v"}, volumeParams{}, "parameters key: invalid argument: contains control characters"},
		{"invalid UTF-8 value", map[string]string{paramDeletionPolicy: "\xff"}, volumeParams{}, "parameters.bucketDeletionPolicy: invalid argument: is longer than 1024 bytes or not valid UTF-8"},
		{"long unknown key shortened", map[string]string{strings.Repeat("x", 100): "v"}, volumeParams{}, `parameters: invalid argument: unknown keys ["` + strings.Repeat("x", 64) + `..."]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseParameters(tc.params)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("parseParameters: %v", err)
				}
				if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(volumeParams{})); d != "" {
					t.Errorf("params (-want +got):\n%s", d)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want prefix %q", err, tc.wantErr)
			}
			if c := codeOf(err); c != codes.InvalidArgument {
				t.Errorf("code = %v, want InvalidArgument", c)
			}
		})
	}
}

func TestValidateVolumeName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c", true},
		{"Sanity_Volume.1:a/b@c+d=e", true},
		{strings.Repeat("n", 128), true},
		{strings.Repeat("n", 129), false},
		{"", false},
		{"with space", false},
		{"tab\there", false},
		{"quote\"", false},
		{"é", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateVolumeName(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("validateVolumeName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "name: ") {
				t.Errorf("message %q does not start with the field", err)
			}
		})
	}
}

func TestValidateRegion(t *testing.T) {
	for region, ok := range map[string]bool{"us-east-1": true, "ring_1.a": true, "": false, "us east": false, strings.Repeat("r", 65): false, "a/b": false} {
		err := validateRegion(region)
		if (err == nil) != ok {
			t.Errorf("validateRegion(%q) = %v, want ok=%v", region, err, ok)
		}
		if err != nil && region != "" && strings.Contains(err.Error(), region) {
			t.Errorf("message quotes the secret's region: %v", err)
		}
	}
}

func TestVolumeID(t *testing.T) {
	tests := []struct {
		id      string
		want    volumeID
		wantErr error // errForeignVolumeID, errInvalidArgument, s3.ErrInvalidBucketName or nil
	}{
		{"v1:delete:pvc-1", volumeID{policyDelete, "pvc-1"}, nil},
		{"v1:deleteWithObjects:team-pvc-1", volumeID{policyDeleteWithObjects, "team-pvc-1"}, nil},
		{"v1:retain:abc", volumeID{policyRetain, "abc"}, nil},
		// Not ours: static volume handles and csi-sanity's fake ids.
		{"my-bucket", volumeID{}, errForeignVolumeID},
		{"fake-vol-id", volumeID{}, errForeignVolumeID},
		{"vol:delete:pvc-1", volumeID{}, errForeignVolumeID},
		{"v:delete:pvc-1", volumeID{}, errForeignVolumeID},
		{"v-1:delete:pvc-1", volumeID{}, errForeignVolumeID},
		{"V1:delete:pvc-1", volumeID{}, errForeignVolumeID},
		// Ours, but not something this version made.
		{"v2:delete:pvc-1", volumeID{}, errInvalidArgument},
		{"v1:delete", volumeID{}, errInvalidArgument},
		{"v1:Delete:pvc-1", volumeID{}, errInvalidArgument},
		{"v1::pvc-1", volumeID{}, errInvalidArgument},
		{"v1:delete:", volumeID{}, s3.ErrInvalidBucketName},
		{"v1:delete:PVC-1", volumeID{}, s3.ErrInvalidBucketName},
		{"v1:delete:a.b.c", volumeID{}, s3.ErrInvalidBucketName},
		{"v1:delete:pvc:1", volumeID{}, s3.ErrInvalidBucketName},
		{"v1:delete:" + strings.Repeat("a", 64), volumeID{}, s3.ErrInvalidBucketName},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			got, err := parseVolumeID("volume_id", tc.id)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("parseVolumeID(%q) = %+v, %v; want error %v", tc.id, got, err, tc.wantErr)
			}
			if err != nil {
				if tc.wantErr != errForeignVolumeID && !strings.HasPrefix(err.Error(), "volume_id: ") {
					t.Errorf("message %q does not start with the field", err)
				}
				return
			}
			if got != tc.want {
				t.Errorf("parseVolumeID(%q) = %+v, want %+v", tc.id, got, tc.want)
			}
			if s := got.String(); s != tc.id {
				t.Errorf("String() = %q, want the id back %q", s, tc.id)
			}
		})
	}
}

// FuzzParseVolumeID checks that the parser never panics, that everything it accepts prints back
// to the same id, and that every accepted id names a valid bucket.
func FuzzParseVolumeID(f *testing.F) {
	for _, id := range []string{"v1:delete:pvc-1", "v1:deleteWithObjects:a-b", "v1:retain:abc", "v2:x:y", "fake-vol-id", "v1:delete:", "v1::", "v:", "v99999999:delete:a"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got, err := parseVolumeID("volume_id", id)
		if err != nil {
			if !errors.Is(err, errForeignVolumeID) && codeOf(err) != codes.InvalidArgument {
				t.Fatalf("parseVolumeID(%q) error %v maps to %v, want InvalidArgument", id, err, codeOf(err))
			}
			return
		}
		if got.String() != id {
			t.Fatalf("parseVolumeID(%q) = %+v prints as %q", id, got, got.String())
		}
		if err := s3.ValidBucketName(got.bucket); err != nil {
			t.Fatalf("parseVolumeID(%q) accepted bucket %q: %v", id, got.bucket, err)
		}
	})
}
