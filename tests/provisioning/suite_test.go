// Package provisioning runs the controller-mode driver process (dynamic provisioning) against
// real components: versitygw (with IAM accounts, versioning and TLS where a test needs them),
// and for the mount test a systemd user manager, the node plugin and FUSE mounts served by the
// mount-s3 stand-in.
package provisioning

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// rpcTimeout is the deadline of every CSI call, like the csi-provisioner's --timeout.
const rpcTimeout = 30 * time.Second

// env is one S3 server and one controller plugin.
type env struct {
	t    *testing.T
	s3   *harness.S3Server
	ctrl *harness.ControllerPlugin
}

// newEnv starts versitygw with opts and a controller plugin with the driver-level credentials
// (root) and extraArgs.
func newEnv(t *testing.T, opts harness.S3Options, extraArgs ...string) *env {
	t.Helper()
	s := harness.StartS3With(t, opts)
	return &env{t: t, s3: s, ctrl: harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: s, WithCredentials: true, ExtraArgs: extraArgs})}
}

var rwx = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
}}

// createReq is a CreateVolume request as the external-provisioner sends it.
func createReq(name string, params, secrets map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: rwx,
		Parameters:         params,
		Secrets:            secrets,
	}
}

// secrets returns a provisioner secret holding the given keys.
func secrets(access, secret string) map[string]string {
	return map[string]string{"access_key_id": access, "secret_access_key": secret}
}

func (e *env) rootSecrets() map[string]string { return secrets(e.s3.AccessKey, e.s3.SecretKey) }

func (e *env) create(req *csi.CreateVolumeRequest) (*csi.Volume, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := e.ctrl.Controller.CreateVolume(ctx, req)
	return resp.GetVolume(), err
}

func (e *env) mustCreate(req *csi.CreateVolumeRequest) *csi.Volume {
	e.t.Helper()
	v, err := e.create(req)
	if err != nil {
		e.t.Fatalf("CreateVolume(%s): %v", req.Name, err)
	}
	return v
}

func deleteReq(id string, secrets map[string]string) *csi.DeleteVolumeRequest {
	return &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}
}

func (e *env) delete(id string, secrets map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := e.ctrl.Controller.DeleteVolume(ctx, deleteReq(id, secrets))
	return err
}

func (e *env) mustDelete(id string, secrets map[string]string) {
	e.t.Helper()
	if err := e.delete(id, secrets); err != nil {
		e.t.Fatalf("DeleteVolume(%s): %v", id, err)
	}
}

// expectCode fails the test unless err carries code.
func expectCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, code)
	}
}

// expectBuckets fails the test unless the server holds exactly want.
func (e *env) expectBuckets(want ...string) {
	e.t.Helper()
	if want == nil {
		want = []string{}
	}
	got := e.s3.ListBuckets(e.t)
	if got == nil {
		got = []string{}
	}
	if d := cmp.Diff(want, got); d != "" {
		e.t.Fatalf("buckets (-want +got):\n%s", d)
	}
}

func TestIdentity(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	ctx := context.Background()
	info, err := e.ctrl.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "s3.csi.scality.com" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	caps, err := e.ctrl.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 1 || caps.GetCapabilities()[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Fatalf("GetPluginCapabilities = %v, %v; want CONTROLLER_SERVICE only", caps, err)
	}
	ccaps, err := e.ctrl.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil || len(ccaps.GetCapabilities()) != 1 || ccaps.GetCapabilities()[0].GetRpc().GetType() != csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME {
		t.Fatalf("ControllerGetCapabilities = %v, %v; want CREATE_DELETE_VOLUME only", ccaps, err)
	}
	// No Node service in controller mode.
	_, err = csi.NewNodeClient(e.ctrl.Conn()).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	expectCode(t, "NodeGetInfo on the controller", err, codes.Unimplemented)
}
