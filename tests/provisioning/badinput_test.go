package provisioning

import (
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestBadInput: malformed CreateVolume, DeleteVolume and ValidateVolumeCapabilities requests
// get InvalidArgument with a message starting with the offending field, never quote a secret,
// and create, change or delete no bucket.
func TestBadInput(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	e.s3.CreateBucket(t, "bystander")
	e.s3.PutObject(t, "bystander", "keep", []byte("x"))
	secretValue := "Sup3rS3cretValue"
	good := func() *csi.CreateVolumeRequest { return createReq("pvc-bad", nil, nil) }
	with := func(mod func(r *csi.CreateVolumeRequest)) *csi.CreateVolumeRequest {
		r := good()
		mod(r)
		return r
	}
	param := func(k, v string) *csi.CreateVolumeRequest {
		return with(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{k: v} })
	}
	secret := func(kv ...string) *csi.CreateVolumeRequest {
		return with(func(r *csi.CreateVolumeRequest) {
			r.Secrets = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				r.Secrets[kv[i]] = kv[i+1]
			}
		})
	}
	capability := func(c *csi.VolumeCapability) *csi.CreateVolumeRequest {
		return with(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{c} })
	}
	mode := func(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
		return &csi.VolumeCapability{AccessType: rwx[0].AccessType, AccessMode: &csi.VolumeCapability_AccessMode{Mode: m}}
	}
	many := map[string]string{}
	for i := range 40 {
		many[fmt.Sprintf("key%d", i)] = "v"
	}

	creates := []struct {
		name  string
		req   *csi.CreateVolumeRequest
		field string
	}{
		// Names.
		{"no name", with(func(r *csi.CreateVolumeRequest) { r.Name = "" }), "name"},
		{"name too long", with(func(r *csi.CreateVolumeRequest) { r.Name = strings.Repeat("n", 129) }), "name"},
		{"name with space", with(func(r *csi.CreateVolumeRequest) { r.Name = "pvc bad" }), "name"},
		{"name with newline", with(func(r *csi.CreateVolumeRequest) { r.Name = "pvc\nbad" }), "name"},
		{"name not ASCII", with(func(r *csi.CreateVolumeRequest) { r.Name = "pvc-é" }), "name"},
		{"name with slash-dot-dot", with(func(r *csi.CreateVolumeRequest) { r.Name = "../../etc" }), ""}, // valid: hashed, see below
		{"name deriving a reserved bucket name", with(func(r *csi.CreateVolumeRequest) { r.Name = "sthree-data" }), "name"},
		// Prefixes.
		{"prefix upper case", param("bucketNamePrefix", "Team-"), "parameters.bucketNamePrefix"},
		{"prefix with dot", param("bucketNamePrefix", "team.a-"), "parameters.bucketNamePrefix"},
		{"prefix with underscore", param("bucketNamePrefix", "team_a-"), "parameters.bucketNamePrefix"},
		{"prefix starting with hyphen", param("bucketNamePrefix", "-team"), "parameters.bucketNamePrefix"},
		{"prefix too long", param("bucketNamePrefix", strings.Repeat("p", 33)), "parameters.bucketNamePrefix"},
		{"prefix reserved", param("bucketNamePrefix", "xn--team"), "parameters.bucketNamePrefix"},
		// Policies.
		{"policy capitalised", param("bucketDeletionPolicy", "Delete"), "parameters.bucketDeletionPolicy"},
		{"policy unknown", param("bucketDeletionPolicy", "purge"), "parameters.bucketDeletionPolicy"},
		{"policy empty", param("bucketDeletionPolicy", ""), "parameters.bucketDeletionPolicy"},
		// Unknown and oversized parameters.
		{"unknown parameter", param("bucketName", "my-bucket"), "parameters"},
		{"reserved parameter the provisioner strips", param("csi.storage.k8s.io/provisioner-secret-name", "s"), "parameters"},
		{"oversized value", param("bucketNamePrefix", strings.Repeat("p", 64<<10)), "parameters.bucketNamePrefix"},
		{"oversized key", param(strings.Repeat("k", 1000), "v"), "parameters key"},
		{"too many parameters", with(func(r *csi.CreateVolumeRequest) { r.Parameters = many }), "parameters"},
		// Secrets.
		{"secret with an unknown key", secret("access_key_id", "AKID", "secret_access_key", secretValue, "secret_key", secretValue), "secrets"},
		{"secret without secret key", secret("access_key_id", "AKID"), "secrets"},
		{"secret without key id", secret("secret_access_key", secretValue), "secrets"},
		{"secret with empty key id", secret("access_key_id", "", "secret_access_key", secretValue), "secrets"},
		{"secret key id with space", secret("access_key_id", "AK ID", "secret_access_key", secretValue), "secrets"},
		{"secret with newline", secret("access_key_id", "AKID", "secret_access_key", secretValue+"\n"), "secrets"},
		{"secret with empty session token", secret("access_key_id", "AKID", "secret_access_key", secretValue, "session_token", ""), "secrets"},
		{"secret with bad region", secret("access_key_id", "AKID", "secret_access_key", secretValue, "region", "eu west"), "secrets"},
		// Capabilities and the rest.
		{"no capabilities", with(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = nil }), "volume_capabilities"},
		{"unknown access mode", capability(mode(csi.VolumeCapability_AccessMode_UNKNOWN)), "volume_capabilities[0]"},
		{"multi node single writer", capability(mode(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)), "volume_capabilities[0]"},
		{"block", capability(&csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}, AccessMode: rwx[0].AccessMode}), "volume_capabilities[0]"},
		{"no access type", capability(&csi.VolumeCapability{AccessMode: rwx[0].AccessMode}), "volume_capabilities[0]"},
		{"nil capability", capability(nil), "volume_capabilities[0]"},
		{"clone", with(func(r *csi.CreateVolumeRequest) {
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "v1:delete:bystander"}}}
		}), "volume_content_source"},
		{"mutable parameters", with(func(r *csi.CreateVolumeRequest) { r.MutableParameters = map[string]string{"a": "b"} }), "mutable_parameters"},
		{"negative capacity", with(func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{RequiredBytes: -1} }), "capacity_range"},
	}
	creates = append(creates, []struct {
		name  string
		req   *csi.CreateVolumeRequest
		field string
	}{
		{"secret value pasted as a key name", secret("access_key_id", "AKID", "secret_access_key", "s", secretValue, ""), "secrets"},
		{"recovery policy unknown", param("mountRecovery", "reboot"), "parameters.mountRecovery"},
	}...)
	// Invisible and control characters in every text field.
	for name, r := range map[string]string{"RLO": "\u202e", "ZWSP": "\u200b", "LS": "\u2028", "BOM": "\ufeff", "NEL": "\u0085", "ESC": "\x1b"} {
		creates = append(creates, []struct {
			name  string
			req   *csi.CreateVolumeRequest
			field string
		}{
			{"name with " + name, with(func(r2 *csi.CreateVolumeRequest) { r2.Name = "pvc" + r + "x" }), "name"},
			{"prefix with " + name, param("bucketNamePrefix", "team"+r), "parameters.bucketNamePrefix"},
			{"parameter key with " + name, param("bucket"+r+"NamePrefix", "team-"), "parameters key"},
			{"secret with " + name, secret("access_key_id", "AKID"+r, "secret_access_key", secretValue), "secrets"},
		}...)
	}
	for _, tc := range creates {
		if tc.field == "" {
			continue
		}
		t.Run("CreateVolume/"+tc.name, func(t *testing.T) {
			_, err := e.create(tc.req)
			expectInvalid(t, err, tc.field, secretValue)
		})
	}

	ids := []string{"", strings.Repeat("v", 2000), "v1:delete:pvc-1\n", "v1:delete:\x00", "v2:delete:bystander", "v1:purge:bystander",
		"v1:delete:Bystander", "v1:delete:by.stander", "v1:delete:bystander:x", "v1:delete", "v1::bystander", "v1:delete:" + strings.Repeat("b", 64)}
	for _, id := range ids {
		t.Run(fmt.Sprintf("DeleteVolume/%.40q", id), func(t *testing.T) {
			expectInvalid(t, e.delete(id, nil), "volume_id", secretValue)
		})
		t.Run(fmt.Sprintf("ValidateVolumeCapabilities/%.40q", id), func(t *testing.T) {
			_, err := e.ctrl.Controller.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: rwx})
			expectInvalid(t, err, "volume_id", secretValue)
		})
	}
	// A bucket that is not a volume's is not one: NotFound, not confirmed.
	_, err := e.ctrl.Controller.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "v1:delete:bystander", VolumeCapabilities: rwx})
	expectCode(t, "ValidateVolumeCapabilities of an unmarked bucket", err, codes.NotFound)
	// A delete request with a bad secret is refused before anything else.
	expectInvalid(t, e.delete("v1:delete:bystander", map[string]string{"access_key_id": "AKID", "secret_access_key": secretValue, "token": "x"}), "secrets", secretValue)

	e.t = t
	e.expectBuckets("bystander")
	if !e.s3.ObjectExists(t, "bystander", "keep") {
		t.Fatal("the bystander bucket lost its object")
	}
	if !e.ctrl.Running() {
		t.Fatal("the controller died")
	}
	if strings.Contains(e.ctrl.Log(), secretValue) {
		t.Error("the controller log contains a secret value")
	}

	// Names that are not bucket names are hashed into one, never used as paths.
	vol := e.mustCreate(createReq("../../etc", nil, nil))
	if b := vol.GetVolumeContext()["bucketName"]; !strings.HasPrefix(b, "etc-") || len(b) != len("etc-")+16 {
		t.Errorf("bucket of ../../etc is %q", b)
	}
	e.mustDelete(vol.GetVolumeId(), nil)
	e.expectBuckets("bystander")
}

// expectInvalid asserts an InvalidArgument error whose message starts with field and does not
// quote secret.
func expectInvalid(t *testing.T, err error, field, secret string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code %v (%v), want InvalidArgument", st.Code(), err)
	}
	if !strings.HasPrefix(st.Message(), field+": ") && !strings.HasPrefix(st.Message(), field+" ") {
		t.Errorf("message %q does not start with the field %q", st.Message(), field)
	}
	if strings.Contains(st.Message(), secret) {
		t.Errorf("message %q quotes a secret", st.Message())
	}
}
