package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/container-storage-interface/spec/lib/go/csi"
	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	systemdmounter "github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/registration"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
	"github.com/s3csi/s3-csi-driver/tests/scality"
)

// pluginDir is the driver's plugin directory on the node (Scality's and this driver's).
func pluginDir() string { return filepath.Join(rig.KubeletDir, "plugins", driverName) }

// nodeEnv is what Scality's node plugin takes from its DaemonSet: the release's own rendered
// object (tests/scality's reproduction of its chart), read from the API server, so the
// stand-ins run with the configuration the release's values give.
type nodeEnv struct {
	endpoint, region, mountS3 string
	accessKey, secretKey      string
}

func scalityNodeEnv(t *testing.T) nodeEnv {
	t.Helper()
	ctx := context.Background()
	var ds appsv1.DaemonSet
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-node"}, &ds))
	var e nodeEnv
	for _, v := range container(t, ds.Spec.Template.Spec, "s3-plugin").Env {
		switch {
		case v.Name == "AWS_ENDPOINT_URL":
			e.endpoint = v.Value
		case v.Name == "AWS_REGION":
			e.region = v.Value
		case v.Name == "MOUNT_S3_PATH":
			e.mountS3 = v.Value
		case v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil && (v.Name == "AWS_ACCESS_KEY_ID" || v.Name == "AWS_SECRET_ACCESS_KEY"):
			var s corev1.Secret
			harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: v.ValueFrom.SecretKeyRef.Name}, &s))
			if v.Name == "AWS_ACCESS_KEY_ID" {
				e.accessKey = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
			} else {
				e.secretKey = string(s.Data[v.ValueFrom.SecretKeyRef.Key])
			}
		}
	}
	if e.endpoint == "" || e.accessKey == "" {
		t.Fatalf("the release's node DaemonSet gives no endpoint or credentials: %+v", e)
	}
	return e
}

// container returns a pod spec's container by name.
func container(t *testing.T, spec corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// driver1x plays the node plugin of one of Scality's 1.x releases on the rig's node, at every
// boundary this driver meets when it takes the node over (tests/scality/SOURCES.md §1.x):
//   - it registers with kubelet under the same name and socket, advertises no node capability
//     (CONTROLLER_SERVICE as a plugin from 1.2.0), accepts MULTI_NODE_MULTI_WRITER and
//     MULTI_NODE_READER_ONLY only, needs volume_id, target and bucketName;
//   - it talks to the node's systemd over its private socket (EXTERNAL, uid 0; on the rig the
//     user manager's), and mounts each target with a transient unit
//     mount-s3-<mountpointVersion>-<random uuid>.service: Type=forking, Description "Mountpoint
//     for Amazon S3 CSI driver FUSE daemon", stdout and stderr on a pty of the host
//     (StandardOutput/StandardError=tty, TTYPath), ExecStart <MOUNT_S3_PATH> <sorted args>
//     <bucket> <target> (unclean exit a failure), Environment AWS_CONFIG_FILE,
//     AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION, AWS_SHARED_CREDENTIALS_FILE, sorted; no
//     slice, kill mode or user; the start's end waited for (30 s);
//   - args: --user-agent-prefix=s3-csi-driver/<version> credential-source#driver (always),
//     --read-only for a read-only request or access mode, --force-path-style from 1.1.0, the
//     PV's mount options as --k or --k=v without --profile, --endpoint-url, --cache-xz,
//     --incremental-upload, --storage-class (dropped); --aws-max-attempts becomes
//     AWS_MAX_ATTEMPTS;
//   - the driver's credentials in <plugin dir>/<podUID>-<volumeID>-s3-csi-config and
//     -s3-csi-credentials (0640, written by rename; profile <podUID>-<volumeID>-s3-csi),
//     written again at every publish, before an existing mount (source mountpoint-s3 in the
//     mount table) is kept as it is;
//   - its unpublish of a mounted target runs a oneshot unit mount-s3-umount-<uuid>.service
//     (/usr/bin/umount <target>, RemainAfterExit) and stops it, then removes the two files; a
//     target without a mount is left as it is, files included. The mount-s3 unit is never
//     stopped: mount-s3 exits when its mount goes.
//
// It runs in this test process, from the release's era of a node until the chart takes over.
type driver1x struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	r      scality.Release
	cfg    nodeEnv
	sd     *sd.Conn
	server *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ptys   []*os.File
}

// startDriver1x starts the release's node plugin and waits until kubelet lists it in CSINode;
// mount-s3 is installed where the release's install-mountpoint puts it (MOUNT_S3_PATH).
func startDriver1x(t *testing.T, r scality.Release) *driver1x {
	t.Helper()
	d := &driver1x{r: r, cfg: scalityNodeEnv(t), done: make(chan struct{})}
	if d.cfg.mountS3 == "" {
		t.Fatal("the release's DaemonSet has no MOUNT_S3_PATH")
	}
	installMountS3(t, d.cfg.mountS3)
	conn, err := systemdmounter.Connect(rig.SystemdSocket())
	harness.Must(t, err)
	d.sd = conn
	harness.Must(t, os.MkdirAll(pluginDir(), 0o750))
	d.serve(t, d, d)
	t.Cleanup(d.stop)
	return d
}

// installMountS3 puts the mount-s3 stand-in at path on the host, as install-mountpoint does:
// into a temporary file of the directory, renamed over the destination.
func installMountS3(t *testing.T, path string) {
	t.Helper()
	src, err := os.ReadFile(harness.MountS3In(env.bin))
	harness.Must(t, err)
	harness.Must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	harness.Must(t, err)
	_, err = f.Write(src)
	harness.Must(t, errors.Join(err, f.Chmod(0o755), f.Close()))
	harness.Must(t, os.Rename(f.Name(), path))
}

// serve registers a CSI node plugin with kubelet on the driver's socket until stop.
func (d *driver1x) serve(t *testing.T, ids csi.IdentityServer, node csi.NodeServer) {
	d.server, d.cancel = serveNodePlugin(t, ids, node, d.done)
}

func serveNodePlugin(t *testing.T, ids csi.IdentityServer, node csi.NodeServer, done chan struct{}) (*grpc.Server, context.CancelFunc) {
	t.Helper()
	sock := filepath.Join(pluginDir(), "csi.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	harness.Must(t, err)
	harness.Must(t, os.Chmod(sock, 0o700))
	server := grpc.NewServer()
	csi.RegisterIdentityServer(server, ids)
	csi.RegisterNodeServer(server, node)
	go func() { _ = server.Serve(lis) }()
	reg, err := registration.New(registration.Config{Dir: filepath.Join(rig.KubeletDir, "plugins_registry"), DriverName: driverName, Endpoint: sock})
	harness.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(done); _ = reg.Serve(ctx) }()
	waitCSINode(t, true)
	return server, cancel
}

// stop is the release's DaemonSet going away: its socket vanishes, kubelet forgets the
// driver; mounts and units stay.
func (d *driver1x) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.server.Stop()
	d.sd.Close()
	for _, p := range d.ptys {
		_ = p.Close()
	}
	d.ptys = nil
	_ = os.Remove(filepath.Join(pluginDir(), "csi.sock"))
	d.cancel = nil
}

func (d *driver1x) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: d.r.DriverVersion()}, nil
}

func (d *driver1x) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	if !d.r.Controller() {
		return &csi.GetPluginCapabilitiesResponse{}, nil
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{
		Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}}}}, nil
}

func (d *driver1x) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver1x) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (d *driver1x) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: rig.NodeName}, nil
}

// credentialFiles1x are the names 1.x gives a volume's profile files and profile: a prefix of
// the pod's and the volume's ids ("/" escaped as "~") then s3-csi-config, s3-csi-credentials
// and s3-csi.
func credentialFiles1x(podUID, volumeID string) (config, creds, profile string) {
	prefix := strings.ReplaceAll(podUID, "/", "~") + "-" + strings.ReplaceAll(volumeID, "/", "~") + "-"
	return prefix + "s3-csi-config", prefix + "s3-csi-credentials", prefix + "s3-csi"
}

// writeFile1x writes a credential file as 1.x does: mode 0640, a temporary file renamed over it.
func writeFile1x(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err := errors.Join(err, f.Chmod(0o640), f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// mountedBy1x is 1.x's "is mounted": a mount table entry at the target whose source is
// mountpoint-s3 (the file system type is not looked at).
func mountedBy1x(target string) bool {
	entries, err := mounttable.Table{}.List()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(entries, func(e mounttable.Entry) bool { return e.MountPoint == target && e.Source == mounttable.FSName })
}

func (d *driver1x) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target, bucket := req.GetTargetPath(), req.GetVolumeContext()["bucketName"]
	if req.GetVolumeId() == "" || target == "" || bucket == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume id, target path, bucketName and capability are required")
	}
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	if mode != csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER && mode != csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY {
		return nil, status.Error(codes.InvalidArgument, "Volume capability not supported")
	}
	podUID := req.GetVolumeContext()["csi.storage.k8s.io/pod.uid"]
	d.mu.Lock()
	defer d.mu.Unlock()
	cfgName, credsName, profile := credentialFiles1x(podUID, req.GetVolumeId())
	cfg, creds := filepath.Join(pluginDir(), cfgName), filepath.Join(pluginDir(), credsName)
	if err := errors.Join(writeFile1x(cfg, "[profile "+profile+"]\n"),
		writeFile1x(creds, "["+profile+"]\naws_access_key_id="+d.cfg.accessKey+"\naws_secret_access_key="+d.cfg.secretKey+"\n")); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mountedBy1x(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	args := map[string]string{"--user-agent-prefix": "s3-csi-driver/" + d.r.DriverVersion() + " credential-source#driver"}
	if req.GetReadonly() || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY {
		args["--read-only"] = ""
	}
	envs := map[string]string{"AWS_ENDPOINT_URL": d.cfg.endpoint, "AWS_REGION": d.cfg.region, "AWS_PROFILE": profile,
		"AWS_CONFIG_FILE": cfg, "AWS_SHARED_CREDENTIALS_FILE": creds}
	for _, o := range req.GetVolumeCapability().GetMount().GetMountFlags() {
		k, v, _ := strings.Cut(strings.TrimSpace(o), "=")
		if !strings.Contains(o, "=") {
			k, v, _ = strings.Cut(strings.TrimSpace(o), " ")
		}
		k = "--" + strings.TrimLeft(k, "-")
		switch k {
		case "--profile", "--endpoint-url", "--cache-xz", "--incremental-upload", "--storage-class", "--foreground", "--help", "--version":
			continue
		case "--aws-max-attempts":
			envs["AWS_MAX_ATTEMPTS"] = v
			continue
		}
		args[k] = v
	}
	if d.r.ForcePathStyle() {
		if _, ok := args["--force-path-style"]; !ok {
			args["--force-path-style"] = ""
		}
	}
	var argv []string
	for k, v := range args {
		if v == "" {
			argv = append(argv, k)
		} else {
			argv = append(argv, k+"="+v)
		}
	}
	sort.Strings(argv)
	var environment []string
	for k, v := range envs {
		if v != "" {
			environment = append(environment, k+"="+v)
		}
	}
	sort.Strings(environment)
	unit := "mount-s3-" + scality.MountpointVersion + "-" + uuid() + ".service"
	exec := append(append([]string{d.cfg.mountS3}, argv...), bucket, target)
	if err := d.runUnit(ctx, unit, "Mountpoint for Amazon S3 CSI driver FUSE daemon", "forking", false, exec, environment); err != nil {
		return nil, status.Errorf(codes.Internal, "Could not mount %q at %q: %v", bucket, target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver1x) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) || !mountedBy1x(target) {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	unit := "mount-s3-umount-" + uuid() + ".service"
	err := d.runUnit(ctx, unit, "Mountpoint for Amazon S3 CSI driver unmount", "oneshot", true, []string{"/usr/bin/umount", target}, nil)
	_, _ = d.sd.StopUnitContext(context.Background(), unit, "fail", nil)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	podUID := podUIDOfTarget(target)
	cfg, creds, _ := credentialFiles1x(podUID, req.GetVolumeId())
	_ = os.Remove(filepath.Join(pluginDir(), cfg))
	_ = os.Remove(filepath.Join(pluginDir(), creds))
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// podUIDOfTarget is the pod id in a kubelet target path .../pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount.
func podUIDOfTarget(target string) string {
	parts := strings.Split(target, "/")
	for i := range parts {
		if parts[i] == "pods" && i+1 < len(parts) {
			return parts[i+1]
		}
	}
	return ""
}

// runUnit starts a transient unit as 1.x does (mode "fail", output on a new pty of the host)
// and waits for its start job, at most 30 s.
func (d *driver1x) runUnit(ctx context.Context, name, description, typ string, remain bool, exec, environment []string) error {
	pty, ttyPath, err := openPty()
	if err != nil {
		return err
	}
	d.ptys = append(d.ptys, pty)
	go func() { _, _ = io.Copy(io.Discard, pty) }() // 1.x reads the pty until it closes
	props := []sd.Property{
		sd.PropDescription(description),
		sd.PropType(typ),
		{Name: "StandardOutput", Value: godbus.MakeVariant("tty")},
		{Name: "StandardError", Value: godbus.MakeVariant("tty")},
		{Name: "TTYPath", Value: godbus.MakeVariant(ttyPath)},
		sd.PropExecStart(exec, true),
	}
	if remain {
		props = append(props, sd.PropRemainAfterExit(true))
	}
	if len(environment) > 0 {
		props = append(props, sd.Property{Name: "Environment", Value: godbus.MakeVariant(environment)})
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	result := make(chan string, 1)
	if _, err := d.sd.StartTransientUnitContext(ctx, name, "fail", props, result); err != nil {
		return err
	}
	select {
	case r := <-result:
		if r != "done" {
			out, _ := rig.Systemctl("status", "--no-pager", name)
			return fmt.Errorf("unit %s: job %s: %s", name, r, out)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("unit %s: %w", name, ctx.Err())
	}
}

// openPty opens a new pseudo-terminal of the host (/dev/ptmx), unlocks it and returns its
// master and the slave's path.
func openPty() (*os.File, string, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	var unlock int32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		return nil, "", e
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, "", err
	}
	return m, fmt.Sprintf("/dev/pts/%d", n), nil
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
