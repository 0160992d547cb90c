// Package registration registers the CSI node plugin with kubelet by itself, the job the
// upstream node-driver-registrar sidecar does: it serves kubelet's plugin registration API
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on a Unix socket in kubelet's plugin
// registry directory. Kubelet's plugin watcher finds the socket, calls GetInfo to learn the
// driver name and the CSI endpoint, then reports the outcome with NotifyRegistrationStatus.
//
// One image fewer to mirror (air-gapped and bare-metal clusters), and the registration lives
// exactly as long as the plugin: the socket is removed when Serve returns, so kubelet
// deregisters a plugin that stopped.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Config says what to register and where.
type Config struct {
	// Dir is kubelet's plugin registry directory (<kubelet>/plugins_registry).
	Dir string
	// DriverName is the CSI driver name (the CSIDriver object's name).
	DriverName string
	// Endpoint is the host path of the plugin's CSI socket, as kubelet sees it.
	Endpoint string
	// RetryAfter is how long to wait before offering the registration again when kubelet
	// reports a failure (default 10 s). Kubelet retries when the socket is created anew.
	RetryAfter time.Duration
}

// SocketPath is the registration socket for cfg: <Dir>/<DriverName>-reg.sock, the name
// node-driver-registrar uses, so switching between the two replaces the same file.
func (cfg Config) SocketPath() string {
	return filepath.Join(cfg.Dir, cfg.DriverName+"-reg.sock")
}

// Status is what kubelet last reported about the registration.
type Status struct {
	// Registered is true once kubelet reported success, false before and after a failure.
	Registered bool
	// Error is kubelet's message when it reported a failure.
	Error string
}

// Server serves kubelet's registration API for one CSI plugin.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	cfg Config

	mu     sync.Mutex
	status Status
	offers int // sockets created so far
	failed chan string
}

// New checks cfg and returns a Server; Serve starts it.
func New(cfg Config) (*Server, error) {
	switch {
	case !filepath.IsAbs(cfg.Dir):
		return nil, fmt.Errorf("registration: the registry directory must be an absolute path, not %q", cfg.Dir)
	case !filepath.IsAbs(cfg.Endpoint):
		return nil, fmt.Errorf("registration: the CSI endpoint must be an absolute path, not %q", cfg.Endpoint)
	case cfg.DriverName == "":
		return nil, errors.New("registration: the driver name is required")
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 10 * time.Second
	}
	return &Server{cfg: cfg, failed: make(chan string, 1)}, nil
}

// GetInfo tells kubelet which plugin this is and where its CSI socket is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.cfg.DriverName,
		Endpoint:          s.cfg.Endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus records kubelet's verdict. A failure makes Serve offer the
// registration again after RetryAfter.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.mu.Lock()
	s.status = Status{Registered: st.GetPluginRegistered(), Error: st.GetError()}
	s.mu.Unlock()
	if st.GetPluginRegistered() {
		klog.InfoS("Registered with kubelet", "driver", s.cfg.DriverName, "endpoint", s.cfg.Endpoint)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	klog.ErrorS(errors.New(st.GetError()), "Kubelet refused the plugin registration; offering it again", "driver", s.cfg.DriverName, "retryAfter", s.cfg.RetryAfter)
	select {
	case s.failed <- st.GetError():
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Status returns kubelet's last report.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Serve creates the registration socket (replacing a stale one) and serves until ctx ends,
// then removes the socket. After kubelet reports a failed registration it waits RetryAfter
// and creates the socket anew, which makes kubelet try again.
func (s *Server) Serve(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.Dir, 0o750); err != nil {
		return fmt.Errorf("registration: create %s: %w", s.cfg.Dir, err)
	}
	srv, err := s.listen()
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			srv.Stop()
			_ = removeSocket(s.cfg.SocketPath())
			return nil
		case <-s.failed:
		}
		// The old server answered kubelet and goes once a new socket replaced its own.
		select {
		case <-ctx.Done():
			srv.Stop()
			_ = removeSocket(s.cfg.SocketPath())
			return nil
		case <-time.After(s.cfg.RetryAfter):
		}
		old := srv
		if srv, err = s.listen(); err != nil {
			old.Stop()
			return err
		}
		old.Stop()
	}
}

// listen creates the socket and starts a gRPC server on it.
func (s *Server) listen() (*grpc.Server, error) {
	path := s.cfg.SocketPath()
	if err := removeSocket(path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("registration: listen on %s: %w", path, err)
	}
	// Serve removes the socket itself: closing a replaced listener must not unlink the path,
	// which by then names its successor.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	s.mu.Lock()
	s.offers++
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.ErrorS(err, "Registration server stopped", "socket", path)
		}
	}()
	klog.InfoS("Offering plugin registration to kubelet", "socket", path, "endpoint", s.cfg.Endpoint)
	return srv, nil
}

// removeSocket removes a socket file left at path; anything else there is an error (the
// registry directory is kubelet's, and only sockets belong in it).
func removeSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("registration: %s exists and is not a socket; refusing to remove it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("registration: remove stale socket: %w", err)
	}
	return nil
}
