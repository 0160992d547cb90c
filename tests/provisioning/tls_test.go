package provisioning

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestCABundle: an endpoint with a certificate from a private CA works with --s3-ca-bundle,
// and only with it: the AWS_CA_BUNDLE variable (set on these machines) is not read.
func TestCABundle(t *testing.T) {
	s := harness.StartS3With(t, harness.S3Options{TLS: true})

	ambient := harness.StartControllerPlugin(t, harness.ControllerPluginOptions{
		S3: s, WithCredentials: true, ExtraEnv: []string{"AWS_CA_BUNDLE=" + s.CABundle},
	})
	_, err := ambient.Controller.CreateVolume(t.Context(), createReq("pvc-tls", nil, nil))
	expectCode(t, "CreateVolume over TLS without --s3-ca-bundle", err, codes.Unavailable)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "certificate") {
		t.Errorf("message %q does not mention the certificate", msg)
	}

	e := &env{t: t, s3: s, ctrl: harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: s, WithCredentials: true, CABundle: s.CABundle})}
	vol := e.mustCreate(createReq("pvc-tls", nil, nil))
	e.expectBuckets("pvc-tls")
	e.mustDelete(vol.GetVolumeId(), nil)
	e.expectBuckets()
}
