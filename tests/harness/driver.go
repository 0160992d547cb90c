package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DriverOptions configure a node plugin process.
type DriverOptions struct {
	// KubeletDir is the fake kubelet root (the systemd manager's shared area).
	KubeletDir string
	// SystemdSocket is the user manager's private socket.
	SystemdSocket string
	// S3 provides endpoint, region and (when WithCredentials) the driver-level credentials.
	S3              *S3Server
	WithCredentials bool
	// NodeID defaults to "node-1".
	NodeID string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Driver is a running scality-s3-csi-driver process (built by make into bin/) with CSI
// clients connected to its socket.
type Driver struct {
	Socket   string
	Node     csi.NodeClient
	Identity csi.IdentityClient
	LogFile  string

	t    TB
	opts DriverOptions
	cmd  *exec.Cmd
	done chan struct{}
	conn *grpc.ClientConn
}

// StartDriver starts the node plugin with a clean environment and waits until its Probe reports
// ready. It stops the process in t.Cleanup.
func StartDriver(t TB, o DriverOptions) *Driver {
	t.Helper()
	if o.NodeID == "" {
		o.NodeID = "node-1"
	}
	dir := t.TempDir()
	d := &Driver{Socket: filepath.Join(dir, "csi.sock"), LogFile: filepath.Join(dir, "driver.log"), t: t, opts: o}
	d.start()
	t.Cleanup(d.Stop)
	return d
}

// Args returns the command line the driver runs with (without the binary).
func (d *Driver) Args() []string {
	o := d.opts
	args := []string{
		"--endpoint=unix://" + d.Socket,
		"--node-id=" + o.NodeID,
		"--kubelet-path=" + o.KubeletDir,
		"--systemd-socket=" + o.SystemdSocket,
		"--mount-s3-path=" + MountS3(d.t),
		"--s3-endpoint-url=" + o.S3.Endpoint,
		"--s3-region=" + o.S3.Region,
		"--mount-timeout=30s",
		"--v=5",
	}
	return append(args, o.ExtraArgs...)
}

// Env returns the environment the driver runs with: nothing inherited, driver credentials only
// when requested.
func (d *Driver) Env() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if d.opts.WithCredentials {
		env = append(env, "AWS_ACCESS_KEY_ID="+d.opts.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+d.opts.S3.SecretKey)
	}
	return env
}

func (d *Driver) start() {
	d.t.Helper()
	log, err := os.OpenFile(d.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatalf("driver log: %v", err)
	}
	defer log.Close()
	cmd := exec.Command(Bin(d.t, "scality-s3-csi-driver"), d.Args()...)
	cmd.Env = d.Env()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start driver: %v", err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.done) }()
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatalf("grpc client: %v", err)
	}
	d.conn, d.Node, d.Identity = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			d.t.Fatalf("driver exited early:\n%s", d.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		p, err := d.Identity.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && p.GetReady().GetValue() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("driver not ready after 20s:\n%s", d.Log())
}

// Stop terminates the driver (SIGTERM, then SIGKILL after 10 s). Calling it twice is fine.
func (d *Driver) Stop() { d.signal(syscall.SIGTERM) }

// Kill kills the driver abruptly, as a crash or an OOM kill would.
func (d *Driver) Kill() { d.signal(syscall.SIGKILL) }

func (d *Driver) signal(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.conn.Close()
	d.cmd = nil
}

// Restart starts the driver again (after Stop or Kill) with the same options.
func (d *Driver) Restart() {
	d.t.Helper()
	d.Stop()
	d.start()
}

// Log returns everything the driver printed so far.
func (d *Driver) Log() string {
	b, _ := os.ReadFile(d.LogFile)
	return string(b)
}

// MountsBelow lists the mount points at or below dir, from /proc/self/mountinfo.
func MountsBelow(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// CleanupMounts registers a cleanup that lazily unmounts anything still mounted below dir
// (deepest first), so a failed test does not leave mounts behind. Register it after starting
// the systemd manager and before the driver, so it runs after the driver stopped and before
// the manager stops.
func CleanupMounts(t TB, dir string) {
	t.Cleanup(func() {
		mounts := MountsBelow(dir)
		for i := len(mounts) - 1; i >= 0; i-- {
			if mounts[i] == dir {
				continue
			}
			if out, err := exec.Command("umount", "-l", mounts[i]).CombinedOutput(); err != nil {
				t.Logf("cleanup: umount -l %s: %v %s", mounts[i], err, out)
			}
		}
	})
}

// NewKubeletDir creates a fake kubelet root that every uid can traverse (so fsGroup tests can
// run processes as other users) and removes it in t.Cleanup.
func NewKubeletDir(t TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubelet-")
	if err != nil {
		t.Fatalf("kubelet dir: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("chmod kubelet dir: %v", err)
	}
	t.Cleanup(func() {
		if m := MountsBelow(dir); len(m) > 0 {
			t.Logf("not removing %s: still mounted: %v", dir, m)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// TargetPath returns kubelet's target path for a pod and PV below kubeletDir, creating its
// parent directory (as kubelet does) with traversable permissions.
func TargetPath(t TB, kubeletDir, podUID, pvName string) string {
	t.Helper()
	target := filepath.Join(kubeletDir, "pods", podUID, "volumes", "kubernetes.io~csi", pvName, "mount")
	for p := filepath.Dir(target); p != kubeletDir; p = filepath.Dir(p) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatalf("mkdir %s: %v", p, err)
		}
		_ = os.Chmod(p, 0o755)
	}
	return target
}

// Conn returns the gRPC connection to the driver's socket.
func (d *Driver) Conn() *grpc.ClientConn { return d.conn }

// String describes the driver for failure messages.
func (d *Driver) String() string { return fmt.Sprintf("driver(%s)", d.Socket) }
