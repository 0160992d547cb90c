package harness

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ControllerPluginOptions configure a CSI controller plugin process
// (scality-s3-csi-driver --mode=controller).
type ControllerPluginOptions struct {
	// S3 provides the endpoint, region and (when WithCredentials) the driver-level credentials.
	S3              *S3Server
	WithCredentials bool
	// CABundle is passed as --s3-ca-bundle when set.
	CABundle string
	// ExtraArgs are appended to the command line; ExtraEnv to the (otherwise empty)
	// environment.
	ExtraArgs []string
	ExtraEnv  []string
}

// ControllerPlugin is a running controller-mode driver process with CSI clients connected.
type ControllerPlugin struct {
	*Process
	Socket     string
	Controller csi.ControllerClient
	Identity   csi.IdentityClient

	conn *grpc.ClientConn
}

// StartControllerPlugin starts the driver in controller mode with a clean environment, waits
// until Probe answers ready, and stops it in t.Cleanup.
func StartControllerPlugin(t TB, o ControllerPluginOptions) *ControllerPlugin {
	t.Helper()
	c := &ControllerPlugin{Socket: filepath.Join(t.TempDir(), "csi.sock")}
	args := []string{
		"--mode=controller",
		"--endpoint=unix://" + c.Socket,
		"--s3-endpoint-url=" + o.S3.Endpoint,
		"--s3-region=" + o.S3.Region,
		"--v=5",
	}
	if o.CABundle != "" {
		args = append(args, "--s3-ca-bundle="+o.CABundle)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if o.WithCredentials {
		env = append(env, "AWS_ACCESS_KEY_ID="+o.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+o.S3.SecretKey)
	}
	c.Process = StartProcess(t, "scality-s3-csi-driver", append(args, o.ExtraArgs...), append(env, o.ExtraEnv...))
	// Dial only once the socket exists: a first failed dial would put the client in gRPC's
	// reconnect backoff (a second or more).
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(c.Socket); err == nil {
			break
		}
		if !c.Running() || time.Now().After(deadline) {
			t.Fatalf("controller plugin did not create its socket:\n%s", c.Log())
		}
		time.Sleep(5 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn, c.Controller, c.Identity = conn, csi.NewControllerClient(conn), csi.NewIdentityClient(conn)
	for time.Now().Before(deadline) {
		if !c.Running() {
			t.Fatalf("controller plugin exited early:\n%s", c.Log())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		p, err := c.Identity.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && p.GetReady().GetValue() {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("controller plugin not ready after 20s:\n%s", c.Log())
	return nil
}

// Conn returns the gRPC connection to the plugin's socket.
func (c *ControllerPlugin) Conn() *grpc.ClientConn { return c.conn }
