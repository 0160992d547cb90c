package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DriverOptions configure a node plugin process.
type DriverOptions struct {
	// KubeletDir is the fake kubelet root (the systemd manager's shared area).
	KubeletDir string
	// SystemdSocket is the user manager's private socket ("" leaves the driver's default, for
	// nodes that do not use systemd mode).
	SystemdSocket string
	// S3 provides endpoint, region and (when WithCredentials) the driver-level credentials.
	S3              *S3Server
	WithCredentials bool
	// NodeID defaults to DefaultNodeID.
	NodeID string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Driver is a running scality-s3-csi-driver process (built by make into bin/) with CSI
// clients connected to its socket.
type Driver struct {
	*Process
	Socket   string
	Node     csi.NodeClient
	Identity csi.IdentityClient

	opts DriverOptions
	conn *grpc.ClientConn
}

// StartDriver starts the node plugin with a clean environment and waits until its Probe reports
// ready. It stops the process in t.Cleanup.
func StartDriver(t TB, o DriverOptions) *Driver {
	t.Helper()
	if o.NodeID == "" {
		o.NodeID = DefaultNodeID
	}
	d := &Driver{Socket: filepath.Join(t.TempDir(), "csi.sock"), opts: o}
	d.Process = StartProcess(t, "scality-s3-csi-driver", d.args(t), d.env())
	d.connect()
	return d
}

func (d *Driver) args(t TB) []string {
	o := d.opts
	args := []string{
		"--endpoint=unix://" + d.Socket,
		"--node-id=" + o.NodeID,
		"--kubelet-path=" + o.KubeletDir,
		"--mount-s3-path=" + MountS3(t),
		"--s3-endpoint-url=" + o.S3.Endpoint,
		"--s3-region=" + o.S3.Region,
		"--mount-timeout=30s",
		"--v=5",
	}
	if o.SystemdSocket != "" {
		args = append(args, "--systemd-socket="+o.SystemdSocket)
	}
	// Credential files: beside the fake kubelet directory, not in the machine's /run, so that
	// suites running at once never share it (CredentialsDir).
	if !hasFlag(o.ExtraArgs, "--systemd-credentials-dir") {
		args = append(args, "--systemd-credentials-dir="+d.CredentialsDir())
	}
	// mount-s3 runs as a user of its own, as the chart configures it: the user is created in
	// the test manager's copy of /etc (Systemd.EtcDir), its cache beside the kubelet directory.
	if !hasFlag(o.ExtraArgs, "--mount-s3-user") {
		args = append(args, "--mount-s3-user="+MountS3User)
	}
	if !hasFlag(o.ExtraArgs, "--systemd-cache-dir") {
		args = append(args, "--systemd-cache-dir="+d.CacheDir())
	}
	// The check of a node-publish secret's namespace reads the volume's PV, which only the
	// suites with an API server and PVs have (they pass the flag themselves): the others publish
	// with secrets the way a node plugin started with --node-publish-secret-scope=any does.
	// The FUSE hand-over helper of this build, wherever $MOUNT_S3 puts mount-s3.
	if !hasFlag(o.ExtraArgs, "--fuse-helper-path") {
		args = append(args, "--fuse-helper-path="+Bin(t, "scality-fuse-helper"))
	}
	if !hasFlag(o.ExtraArgs, "--node-publish-secret-scope") {
		args = append(args, "--node-publish-secret-scope=any")
	}
	return append(args, o.ExtraArgs...)
}

// hasFlag reports whether args set flag (as --flag=value or --flag value).
func hasFlag(args []string, flag string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
}

// CredentialsDir is where the driver writes systemd-mode credential files (unless ExtraArgs
// names another): a directory beside the fake kubelet directory.
func (d *Driver) CredentialsDir() string {
	return strings.TrimSuffix(d.opts.KubeletDir, "/") + "-credentials"
}

// MountS3User is the user the harness's node plugins run mount-s3 as (--mount-s3-user).
const MountS3User = "s3csi-mount"

// CacheDir is the node plugin's --systemd-cache-dir: beside the kubelet directory, like
// CredentialsDir.
func (d *Driver) CacheDir() string {
	return strings.TrimSuffix(d.opts.KubeletDir, "/") + "-cache"
}

// env is the driver's environment: nothing inherited, driver credentials only when requested.
func (d *Driver) env() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if d.opts.WithCredentials {
		env = append(env, "AWS_ACCESS_KEY_ID="+d.opts.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+d.opts.S3.SecretKey)
	}
	return env
}

// connect dials the socket and waits until Probe reports ready.
func (d *Driver) connect() {
	d.t.Helper()
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatalf("grpc client: %v", err)
	}
	if d.conn != nil {
		d.conn.Close()
	}
	d.conn, d.Node, d.Identity = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !d.Running() {
			d.t.Fatalf("driver exited early:\n%s", d.Log())
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

// Restart stops the driver (if running) and starts it again with the same options.
func (d *Driver) Restart() {
	d.t.Helper()
	d.Stop()
	d.Start()
	d.connect()
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
	return NewKubeletDirIn(t, "")
}

// NewKubeletDirIn is NewKubeletDir in parent ("": the temporary directory): a unit with a
// private /tmp (--mount-s3-protect-system) cannot see one below /tmp.
func NewKubeletDirIn(t TB, parent string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "kubelet-")
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
		os.RemoveAll(dir + "-credentials") // Driver.CredentialsDir
		os.RemoveAll(dir + "-cache")       // Driver.CacheDir
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
