package provisioning

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestCredentials: wrong or insufficient credentials are PermissionDenied and create nothing;
// no credentials at all is FailedPrecondition; secrets never reach the log.
func TestCredentials(t *testing.T) {
	e := newEnv(t, harness.S3Options{IAM: true})
	e.s3.CreateUser(t, "readonlyuser", "readonlysecret123", "user") // may not create buckets

	tests := []struct {
		name    string
		secrets map[string]string
		code    codes.Code
	}{
		{"unknown access key", secrets("NOSUCHKEY", "whatever123"), codes.PermissionDenied},
		{"wrong secret key", secrets(e.s3.AccessKey, "wrongsecret123"), codes.PermissionDenied},
		{"account without the right to create buckets", secrets("readonlyuser", "readonlysecret123"), codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.create(createReq("pvc-creds", nil, tc.secrets))
			expectCode(t, "CreateVolume", err, tc.code)
			if !strings.Contains(status.Convert(err).Message(), `create volume "pvc-creds"`) {
				t.Errorf("message %q does not name the volume", status.Convert(err).Message())
			}
		})
	}
	e.t = t
	e.expectBuckets()

	t.Run("no credentials", func(t *testing.T) {
		bare := harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: e.s3})
		_, err := bare.Controller.CreateVolume(t.Context(), createReq("pvc-creds", nil, nil))
		expectCode(t, "CreateVolume without any credentials", err, codes.FailedPrecondition)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "provisioner-secret-name") {
			t.Errorf("message %q does not say how to configure credentials", msg)
		}
		// With a provisioner secret it works, and the node is told to use the secret too.
		resp, err := bare.Controller.CreateVolume(t.Context(), createReq("pvc-creds", nil, e.rootSecrets()))
		if err != nil {
			t.Fatal(err)
		}
		if src := resp.GetVolume().GetVolumeContext()["authenticationSource"]; src != "secret" {
			t.Errorf("authenticationSource %q, want secret", src)
		}
		// A delete without the secret cannot authenticate either.
		_, err = bare.Controller.DeleteVolume(t.Context(), deleteReq(resp.GetVolume().GetVolumeId(), nil))
		expectCode(t, "DeleteVolume without any credentials", err, codes.FailedPrecondition)
		if _, err := bare.Controller.DeleteVolume(t.Context(), deleteReq(resp.GetVolume().GetVolumeId(), e.rootSecrets())); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("secret region", func(t *testing.T) {
		// versitygw serves us-east-1 and refuses requests signed for another region: the
		// secret's region is the one the controller signs with.
		sec := e.rootSecrets()
		sec["region"] = "eu-west-3"
		_, err := e.create(createReq("pvc-region", nil, sec))
		expectCode(t, "CreateVolume signed for another region", err, codes.PermissionDenied)
		sec["region"] = e.s3.Region
		vol := e.mustCreate(createReq("pvc-region", nil, sec))
		e.mustDelete(vol.GetVolumeId(), sec)
	})

	for _, p := range []*harness.Process{e.ctrl.Process} {
		for _, secret := range []string{e.s3.SecretKey, "wrongsecret123", "readonlysecret123", "whatever123"} {
			if strings.Contains(p.Log(), secret) {
				t.Errorf("controller log contains the secret %q", secret)
			}
		}
	}
}
