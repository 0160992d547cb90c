package driver

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Checker reports whether a backend the plugin depends on is usable.
type Checker interface {
	Check(ctx context.Context) error
}

// IdentityServer implements the CSI Identity service.
type IdentityServer struct {
	csi.UnimplementedIdentityServer
	controller bool
	checker    Checker
}

// NewIdentityServer returns the Identity service. controller says whether this process serves
// the Controller service (advertised as CONTROLLER_SERVICE). checker, when not nil, decides
// Probe's readiness (the systemd mounter checks D-Bus).
func NewIdentityServer(controller bool, checker Checker) *IdentityServer {
	return &IdentityServer{controller: controller, checker: checker}
}

// GetPluginInfo returns the driver name and version.
func (s *IdentityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: version.DriverName, VendorVersion: version.Version}, nil
}

// GetPluginCapabilities advertises CONTROLLER_SERVICE in controller mode and nothing else.
func (s *IdentityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if s.controller {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
		})
	}
	return resp, nil
}

// Probe reports ready=false (not an error) while the mount backend is unreachable, so the
// liveness probe fails and the cause is in the log.
func (s *IdentityServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.checker == nil {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.checker.Check(ctx); err != nil {
		klog.ErrorS(err, "Probe: mount backend is not ready")
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
