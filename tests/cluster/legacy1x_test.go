package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/legacy"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/registration"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// driver1x plays the Scality S3 CSI driver 1.x's node plugin on the rig's node, as
// ../shared/reference/anchors.md §3-§4 and §8 describe it: it registers with kubelet under the
// same driver name, and publishes each volume as a transient unit
// mount-s3-<mountpointVersion>-<uuid>.service (Type=forking) of the node's systemd running
// mount-s3 directly on the kubelet target path, with the driver's credentials in an AWS
// profile pair <pod>-<volume>-s3-csi-{config,credentials} in the plugin directory; its
// unpublish unmounts the target (mount-s3 then exits, and its unit with it). It runs in this
// test process, from the 1.x era of a node until the chart is installed over it.
type driver1x struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	mountS3 string
	server  *grpc.Server
	cancel  context.CancelFunc
	done    chan struct{}

	mu    sync.Mutex
	units map[string]string // target → unit
}

// version1x is the mountpoint version 1.x names its units after.
const version1x = "1.2.0"

// pluginDir is the driver's plugin directory on the node (the same for 1.x and this driver).
func pluginDir() string { return filepath.Join(rig.KubeletDir, "plugins", driverName) }

// startDriver1x starts the 1.x node plugin and waits until kubelet lists it in CSINode.
func startDriver1x(t *testing.T) *driver1x {
	t.Helper()
	d := &driver1x{mountS3: harness.MountS3In(env.bin), units: map[string]string{}, done: make(chan struct{})}
	if err := os.MkdirAll(pluginDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(pluginDir(), "csi.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	d.server = grpc.NewServer()
	csi.RegisterIdentityServer(d.server, d)
	csi.RegisterNodeServer(d.server, d)
	go func() { _ = d.server.Serve(lis) }()
	reg, err := registration.New(registration.Config{Dir: filepath.Join(rig.KubeletDir, "plugins_registry"), DriverName: driverName, Endpoint: sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { defer close(d.done); _ = reg.Serve(ctx) }()
	t.Cleanup(d.stop)
	waitCSINode(t, true)
	return d
}

// stop is the 1.x DaemonSet going away: its sockets vanish, kubelet forgets the driver; the
// mounts it made stay with their units.
func (d *driver1x) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.server.Stop()
	_ = os.Remove(filepath.Join(pluginDir(), "csi.sock"))
	d.cancel = nil
}

// waitCSINode waits until kubelet lists (or no longer lists) the driver on the node.
func waitCSINode(t *testing.T, listed bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ := kubectl(t, "get", "csinode", rig.NodeName, "-o", "jsonpath={.spec.drivers[*].name}")
		if strings.Contains(out, driverName) == listed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet lists drivers %q; want %s listed=%v", out, driverName, listed)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *driver1x) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: "1.2.0"}, nil
}

func (d *driver1x) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
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

// NodePublishVolume mounts the bucket the 1.x way (nothing when the target is mounted already).
func (d *driver1x) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.units[target]; ok {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	podUID := req.GetVolumeContext()["csi.storage.k8s.io/pod.uid"]
	bucket := req.GetVolumeContext()["bucketName"]
	if podUID == "" || bucket == "" {
		return nil, status.Error(codes.InvalidArgument, "pod uid and bucketName are required")
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	f := legacy.FilesFor(podUID, req.GetVolumeId())
	cfg, creds := filepath.Join(pluginDir(), f.Config), filepath.Join(pluginDir(), f.Credentials)
	if err := os.WriteFile(cfg, []byte("[profile "+f.Profile+"]\n"), 0o600); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.WriteFile(creds, []byte("["+f.Profile+"]\naws_access_key_id = "+rig.S3AccessKey+"\naws_secret_access_key = "+rig.S3SecretKey+"\n"), 0o600); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	unit := "mount-s3-" + version1x + "-" + uuid() + ".service"
	args := []string{"--unit=" + unit, "-p", "Type=forking", "-p", "Description=Mountpoint for Amazon S3 CSI driver FUSE daemon",
		"--setenv=AWS_REGION=us-east-1", "--setenv=AWS_ENDPOINT_URL=" + rig.S3Endpoint(), "--setenv=AWS_PROFILE=" + f.Profile,
		"--setenv=AWS_CONFIG_FILE=" + cfg, "--setenv=AWS_SHARED_CREDENTIALS_FILE=" + creds,
		d.mountS3, "--force-path-style"}
	for _, o := range req.GetVolumeCapability().GetMount().GetMountFlags() {
		args = append(args, "--"+strings.TrimPrefix(o, "--"))
	}
	args = append(args, bucket, target)
	if out, err := rig.SystemdRun(args...); err != nil {
		return nil, status.Errorf(codes.Internal, "%v: %s", err, out)
	}
	d.units[target] = unit
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target (1.x's unmount: mount-s3 exits with it).
func (d *driver1x) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := syscall.Unmount(req.GetTargetPath(), 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	_ = os.Remove(req.GetTargetPath())
	delete(d.units, req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unitOf returns the 1.x unit of target ("" when it made none).
func (d *driver1x) unitOf(target string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.units[target]
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// install1xRelease installs the release of the 1.x chart's objects (tests/helm/testdata/
// chart-1x: CSIDriver, node DaemonSet, controller Deployment, service accounts, RBAC, with
// 1.x's selectors) under the name this suite's chart uses, as a 1.x user has it. Its pods never
// run here (a node selector no node matches, no controller replica: there is no 1.x image);
// the 1.x node plugin is startDriver1x's process.
func install1xRelease(t *testing.T) {
	t.Helper()
	chart := filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "chart-1x")
	mustRun(t)(helm(t, "install", release, chart, "-n", releaseNS, "--set", "node.nodeSelector.s3-csi-1x-fixture=no-node", "--set", "controller.replicas=0"))
}

// expect1xSelectors checks that the node DaemonSet and the controller Deployment have the 1.x
// release's selectors (the chart keeps them through an upgrade; a rollback finds them).
func expect1xSelectors(t *testing.T) {
	t.Helper()
	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-node"}, &ds))
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "s3-csi-controller"}, &dep))
	for what, got := range map[string]map[string]string{"node DaemonSet": ds.Spec.Selector.MatchLabels, "controller Deployment": dep.Spec.Selector.MatchLabels} {
		if got["app.kubernetes.io/name"] != "scality-mountpoint-s3-csi-driver" || got["app.kubernetes.io/instance"] != release || got["app"] == "" {
			t.Errorf("%s selector %v, want 1.x's (app, app.kubernetes.io/name, app.kubernetes.io/instance)", what, got)
		}
	}
}

// testUpgradeFrom1x installs the chart over a node the Scality driver 1.x serves, with the
// node in systemd mode and then in pod mode: Running pods whose volumes 1.x mounted keep
// reading and writing on their 1.x mounts (no second mount on top, no attachment or
// Mountpoint Pod for them, their credential files refreshed by kubelet's republish, counted as
// legacy mounts); once deleted, their units, mounts and credential files are gone; new pods
// mount in the node's mode.
func testUpgradeFrom1x(t *testing.T) {
	for _, mode := range []string{"systemd", "pod"} {
		t.Run(mode, func(t *testing.T) { upgradeFrom1x(t, mode) })
	}
}

func upgradeFrom1x(t *testing.T, mode string) {
	expectClean(t)
	// The 1.x era: this chart is not installed; the 1.x CSIDriver and node plugin are.
	mustRun(t)(helm(t, "uninstall", release, "-n", releaseNS, "--wait"))
	waitCSINode(t, false)
	install1xRelease(t)
	mustRun(t)(kubectl(t, "label", "node", rig.NodeName, "s3.csi.scality.com/mounter="+mode, "--overwrite"))
	old := startDriver1x(t)

	ns := newNamespace(t, "from1x-"+mode)
	bucket := "from1x-" + mode + "-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	var pods []*corev1.Pod
	for _, name := range []string{"a", "b"} {
		p := workload(t, ns, name, claim, podOpts{})
		pods = append(pods, p)
	}
	waitRunning(t, 2*time.Minute, pods...)
	type mount1x struct{ target, unit string }
	var mounts []mount1x
	for _, p := range pods {
		mustRun(t)(execIn(t, p, "printf '1.x\\n' > /data/before-"+p.Name))
		target := targetOf(t, p, "data")
		unit := old.unitOf(target)
		if unit == "" {
			t.Fatalf("the 1.x plugin did not mount %s", target)
		}
		mounts = append(mounts, mount1x{target, unit})
	}
	credFiles := func() []string {
		m, _ := filepath.Glob(filepath.Join(pluginDir(), "*-s3-csi-credentials"))
		return m
	}
	if n := len(credFiles()); n != 2 {
		t.Fatalf("%d 1.x credential files, want 2", n)
	}
	inode := map[string]uint64{}
	for _, f := range credFiles() {
		inode[f] = inodeOf(t, f)
	}

	// The upgrade: the 1.x node plugin goes, this chart comes, as docs/upgrade.md says: one
	// helm upgrade of the 1.x release (installChart upgrades an existing release), no delete.
	old.stop()
	installChart(t)
	waitNodeMode(t, mode)
	expect1xSelectors(t)
	legacyCount := func() string {
		var plugins corev1.PodList
		harness.Must(t, env.c.List(context.Background(), &plugins, client.InNamespace(releaseNS), client.MatchingLabels{"app": "s3-csi-node"}))
		if len(plugins.Items) != 1 || plugins.Items[0].Status.PodIP == "" {
			return fmt.Sprintf("%d node plugin pods", len(plugins.Items))
		}
		out, err := command(t, 10*time.Second, "curl", "-sf", fmt.Sprintf("http://%s:9809/metrics", plugins.Items[0].Status.PodIP))
		if err != nil {
			return err.Error()
		}
		v, n := harness.MetricSum(out, "s3csi_node_mounts", `mode="legacy"`, `node="`+rig.NodeName+`"`)
		if n == 0 {
			return "absent"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	// kubelet republishes every volume (requiresRepublish) within its sync period: the 1.x
	// mounts are kept and their credential files rewritten.
	waitFor(t, 2*time.Minute, "kubelet's republish of the 1.x volumes", func() string {
		for f, ino := range inode {
			if now := inodeOf(t, f); now == ino {
				return f + " not rewritten yet"
			}
		}
		return ""
	})
	if got := legacyCount(); got != "2" {
		t.Errorf(`s3csi_node_mounts{mode="legacy"} = %s, want 2`, got)
	}
	for i, p := range pods {
		out := mustRun(t)(execIn(t, p, "cat /data/before-"+p.Name+" && printf 'after\\n' > /data/after-"+p.Name))
		if !strings.Contains(out, "1.x") {
			t.Errorf("%s reads %q on its 1.x mount", p.Name, out)
		}
		if got := string(env.s3.GetObject(t, bucket, "after-"+p.Name)); got != "after\n" {
			t.Errorf("%s wrote %q through its 1.x mount after the upgrade", p.Name, got)
		}
		if n := len(mountsAt(t, mounts[i].target)); n != 1 {
			t.Errorf("%s holds %d mounts, want the 1.x mount alone", mounts[i].target, n)
		}
		if out, _ := rig.Systemctl("is-active", mounts[i].unit); strings.TrimSpace(out) != "active" {
			t.Errorf("1.x unit %s is %q", mounts[i].unit, strings.TrimSpace(out))
		}
		if n := containerRestarts(t, p); n != 0 {
			t.Errorf("%s restarted %d times", p.Name, n)
		}
	}
	if s := currentState(t); len(s.mpPods) != 0 || len(s.attachments) != 0 || len(s.stateDirs) != 0 {
		t.Errorf("the driver made state for workloads 1.x mounted: %s", s)
	}

	// helm rollback to the 1.x revision, in one command: 1.x's objects come back, this chart's
	// node plugin goes, the 1.x node plugin takes over again, and the 1.x mounts still serve
	// their writers. Then the upgrade again.
	mustRun(t)(helm(t, "rollback", release, "1", "-n", releaseNS))
	waitCSINode(t, false)
	expect1xSelectors(t)
	old = startDriver1x(t)
	for _, p := range pods {
		mustRun(t)(execIn(t, p, "printf 'rolled back\\n' > /data/rollback-"+p.Name))
		if got := string(env.s3.GetObject(t, bucket, "rollback-"+p.Name)); got != "rolled back\n" {
			t.Errorf("%s wrote %q through its 1.x mount after the rollback", p.Name, got)
		}
	}
	old.stop()
	installChart(t)
	waitNodeMode(t, mode)
	expect1xSelectors(t)

	// They leave: every trace of 1.x goes with them.
	deletePods(t, pods...)
	for _, m := range mounts {
		if out, _ := rig.Systemctl("list-units", "--all", "--plain", "--no-legend", m.unit); strings.TrimSpace(out) != "" {
			t.Errorf("1.x unit left: %s", out)
		}
	}
	if f := credFiles(); len(f) != 0 {
		t.Errorf("1.x credential files left: %v", f)
	}
	waitFor(t, time.Minute, "the legacy count to reach 0", func() string {
		if got := legacyCount(); got != "0" {
			return `s3csi_node_mounts{mode="legacy"} = ` + got
		}
		return ""
	})
	expectClean(t)

	// A new pod of the volume mounts in the node's mode.
	p := workload(t, ns, "new", claim, podOpts{})
	waitRunning(t, 2*time.Minute, p)
	s := currentState(t)
	switch mode {
	case "systemd":
		if len(s.units) != 1 || legacy.IsUnit(s.units[0]) || len(s.mpPods) != 0 {
			t.Errorf("a new pod on a systemd-mode node: %s", s)
		}
	case "pod":
		if len(s.units) != 0 || len(s.mpPods) != 1 {
			t.Errorf("a new pod on a pod-mode node: %s", s)
		}
	}
	if !strings.Contains(mustRun(t)(execIn(t, p, "cat /data/after-a")), "after") {
		t.Error("the new pod does not read what the 1.x-mounted pod wrote")
	}
	deletePods(t, p)
	expectClean(t)
	setMode(t, "systemd")
}

// targetOf is kubelet's target path of a pod's volume: <kubelet>/pods/<uid>/volumes/
// kubernetes.io~csi/<pv>/mount.
func targetOf(t *testing.T, p *corev1.Pod, claim string) string {
	t.Helper()
	var cur corev1.Pod
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	var pvc corev1.PersistentVolumeClaim
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: claim}, &pvc))
	return filepath.Join(rig.KubeletDir, "pods", string(cur.UID), "volumes", "kubernetes.io~csi", pvc.Spec.VolumeName, "mount")
}

// mountsAt lists the mount table's entries (file system types) at path.
func mountsAt(t *testing.T, path string) []string {
	t.Helper()
	entries, err := mounttable.Table{}.List()
	harness.Must(t, err)
	var out []string
	for _, e := range entries {
		if e.MountPoint == path {
			out = append(out, e.FsType)
		}
	}
	return out
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// waitNodeMode waits until the node plugin reports the node's mode (its annotation).
func waitNodeMode(t *testing.T, mode string) {
	t.Helper()
	waitFor(t, time.Minute, "the node plugin to report mode "+mode, func() string {
		if got := nodeObj(t).Annotations["s3.csi.scality.com/effective-mounter"]; got != mode {
			return "effective mode " + got
		}
		return ""
	})
}

// waitFor is harness.Eventually with a description.
func waitFor(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	harness.Eventually(t, d, func() string {
		if why := cond(); why != "" {
			return what + ": " + why
		}
		return ""
	})
}
