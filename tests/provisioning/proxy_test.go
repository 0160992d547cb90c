package provisioning

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestProxy: with --http-proxy the controller creates and deletes buckets through the proxy.
// The endpoint leads nowhere except through it (0.0.0.0 on a port nothing listens on, routed
// by the proxy to the S3 server), and the proxy counts the requests. A proxy in the
// controller's environment is not read: the same endpoint without the flag is unreachable.
func TestProxy(t *testing.T) {
	s := harness.StartS3(t)
	port, err := harness.FreePort()
	harness.Must(t, err)
	nowhere := fmt.Sprintf("0.0.0.0:%d", port)
	proxy := harness.StartProxy(t, map[string]string{nowhere: strings.TrimPrefix(s.Endpoint, "http://")})

	ambient := harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: s, WithCredentials: true,
		ExtraArgs: []string{"--s3-endpoint-url=http://" + nowhere}, ExtraEnv: []string{"HTTP_PROXY=" + proxy.URL(), "http_proxy=" + proxy.URL()}})
	_, err = ambient.Controller.CreateVolume(t.Context(), createReq("pvc-ambient", nil, nil))
	expectCode(t, "CreateVolume with a proxy only in the environment", err, codes.Unavailable)
	if n := proxy.Total(); n != 0 {
		t.Errorf("the controller used the proxy of its environment: %d requests", n)
	}

	e := &env{t: t, s3: s, ctrl: harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: s, WithCredentials: true,
		ExtraArgs: []string{"--s3-endpoint-url=http://" + nowhere, "--http-proxy=" + proxy.URL()}})}
	vol := e.mustCreate(createReq("pvc-proxied", nil, nil))
	e.expectBuckets("pvc-proxied")
	e.mustDelete(vol.GetVolumeId(), nil)
	e.expectBuckets()
	if n := proxy.Count(nowhere); n < 2 {
		t.Errorf("the proxy carried %d requests, want the creation's and the deletion's", n)
	}
}
