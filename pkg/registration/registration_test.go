package registration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// kubelet plays kubelet's plugin watcher: it dials the registration socket and calls GetInfo.
func kubelet(t *testing.T, socket string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestRegistrationLifecycle(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Dir: filepath.Join(dir, "plugins_registry"), DriverName: "s3.csi.scality.com", Endpoint: "/var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock", RetryAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "plugins_registry", "s3.csi.scality.com-reg.sock")
	if s.cfg.SocketPath() != socket {
		t.Fatalf("socket = %s, want %s", s.cfg.SocketPath(), socket)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	waitFor(t, "the registration socket", func() bool { return exists(socket) })

	k := kubelet(t, socket)
	info, err := k.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "s3.csi.scality.com" || info.Endpoint != "/var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock" || strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}

	// A refusal makes the plugin offer itself again: the socket goes, then comes back.
	if _, err := k.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	if got := s.Status(); got.Registered || got.Error != "version mismatch" {
		t.Errorf("status after a refusal = %+v", got)
	}
	waitFor(t, "a new registration socket", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.offers == 2 && exists(socket)
	})
	k = kubelet(t, socket)
	if _, err := k.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if got := s.Status(); !got.Registered || got.Error != "" {
		t.Errorf("status after success = %+v", got)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if exists(socket) {
		t.Error("the registration socket outlived Serve: kubelet would keep a stopped plugin registered")
	}
}

func TestRegistrationRefusesToReplaceAFile(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Dir: dir, DriverName: "d", Endpoint: "/e.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.cfg.SocketPath(), []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Serve over a regular file = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(s.cfg.SocketPath()); string(b) != "not a socket" {
		t.Error("the file was replaced")
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{Dir: "rel", DriverName: "d", Endpoint: "/e"},
		{Dir: "/d", DriverName: "d", Endpoint: "e"},
		{Dir: "/d", Endpoint: "/e"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
