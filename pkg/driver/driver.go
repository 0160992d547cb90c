// Package driver is the CSI boundary: the gRPC server on a Unix socket, the Identity and Node
// services, request validation, and the single mapping of errors to gRPC codes. It depends on
// the mounter.Mounter interface only; main wires the implementation in.
package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Server is the CSI gRPC server. Register services with the Register* methods, then Run.
type Server struct {
	endpoint string
	grpc     *grpc.Server
	onListen []func()
}

// NewServer returns a server for endpoint ("unix:///path/csi.sock" or "unix:/path/csi.sock").
// Every call goes through one interceptor that logs it (request bodies only at -v=5, with
// secrets stripped) and converts errors to gRPC status codes.
func NewServer(endpoint string) (*Server, error) {
	if _, err := socketPath(endpoint); err != nil {
		return nil, err
	}
	return &Server{endpoint: endpoint, grpc: grpc.NewServer(grpc.UnaryInterceptor(intercept))}, nil
}

// RegisterIdentity registers the Identity service.
func (s *Server) RegisterIdentity(ids csi.IdentityServer) { csi.RegisterIdentityServer(s.grpc, ids) }

// RegisterNode registers the Node service.
func (s *Server) RegisterNode(ns csi.NodeServer) { csi.RegisterNodeServer(s.grpc, ns) }

// RegisterController registers the Controller service.
func (s *Server) RegisterController(cs csi.ControllerServer) {
	csi.RegisterControllerServer(s.grpc, cs)
}

// OnListen registers f to run once Run listens on the socket (before it serves the first call).
func (s *Server) OnListen(f func()) { s.onListen = append(s.onListen, f) }

// Run listens on the socket (mode 0600, replacing a stale socket file) and serves until ctx
// ends, then stops gracefully and removes the socket.
func (s *Server) Run(ctx context.Context) error {
	path, _ := socketPath(s.endpoint)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale socket: %w", err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("chmod socket: %w", err)
	}
	klog.InfoS("CSI server listening", "endpoint", s.endpoint)
	for _, f := range s.onListen {
		f()
	}
	errCh := make(chan error, 1)
	go func() { errCh <- s.grpc.Serve(lis) }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.grpc.Stop()
	}
	os.Remove(path)
	return nil
}

// socketPath extracts the filesystem path from a unix:// endpoint.
func socketPath(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "unix:")
	if !ok {
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported (unix:///path/csi.sock)", endpoint)
	}
	path := strings.TrimPrefix(rest, "//")
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: socket path must be absolute", endpoint)
	}
	return filepath.Clean(path), nil
}

// intercept logs every call and maps its error to a gRPC status in one place.
func intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if klog.V(5).Enabled() {
		klog.InfoS("CSI request", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req))
	}
	resp, err := handler(ctx, req)
	err = toStatus(err)
	if err != nil {
		st, _ := status.FromError(err)
		klog.ErrorS(errors.New(st.Message()), "CSI call failed", "method", info.FullMethod, "code", st.Code().String(), "duration", time.Since(start))
		return nil, err
	}
	klog.V(2).InfoS("CSI call succeeded", "method", info.FullMethod, "duration", time.Since(start))
	if klog.V(5).Enabled() {
		klog.InfoS("CSI response", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp))
	}
	return resp, nil
}
