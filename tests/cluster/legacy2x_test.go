package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/registration"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// version2x is the release of Scality's driver the 2.x objects are labelled with.
const version2x = "2.2.0"

// driver2x plays the node plugin of Scality's S3 CSI driver 2.x (pod mode) on the rig's node,
// as ../shared/reference/anchors.md §5.2 describes its publish: find the workload's attachment
// (polled every 2 s, by node, PV and volume id, then the workload UID in its map), wait for the
// Mountpoint Pod to be Running, and unless the shared mount at
// <kubelet>/plugins/s3.csi.scality.com/mnt/<Mountpoint Pod> is there already: write the
// credentials into the pod's comm directory, mount FUSE there from this process
// (MS_NODEV|MS_NOSUID|MS_NOATIME, fd=,rootmode=40000,user_id=0,group_id=0,default_permissions,
// allow_other), send the options and the fd over comm/mount.sock (§5.3), wait until it answers;
// then bind the shared mount at the target (a plain MS_BIND, as mount-utils does). Its unpublish
// unmounts the bind only (§5.6). It runs in this test process, from the 2.x era of a node until
// the chart is installed over it.
type driver2x struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	server *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // one publish at a time (2.x locks per Mountpoint Pod)
}

// startDriver2x starts the 2.x node plugin and waits until kubelet lists it in CSINode.
func startDriver2x(t *testing.T) *driver2x {
	t.Helper()
	d := &driver2x{done: make(chan struct{})}
	harness.Must(t, os.MkdirAll(pluginDir(), 0o750))
	sock := filepath.Join(pluginDir(), "csi.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	harness.Must(t, err)
	d.server = grpc.NewServer()
	csi.RegisterIdentityServer(d.server, d)
	csi.RegisterNodeServer(d.server, d)
	go func() { _ = d.server.Serve(lis) }()
	reg, err := registration.New(registration.Config{Dir: filepath.Join(rig.KubeletDir, "plugins_registry"), DriverName: driverName, Endpoint: sock})
	harness.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { defer close(d.done); _ = reg.Serve(ctx) }()
	t.Cleanup(d.stop)
	waitCSINode(t, true)
	return d
}

// stop is the 2.x DaemonSet going away: the mounts, Mountpoint Pods and attachments stay.
func (d *driver2x) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.server.Stop()
	_ = os.Remove(filepath.Join(pluginDir(), "csi.sock"))
	d.cancel = nil
}

func (d *driver2x) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: version2x}, nil
}

func (d *driver2x) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver2x) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver2x) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (d *driver2x) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: rig.NodeName}, nil
}

func (d *driver2x) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	podUID := req.GetVolumeContext()["csi.storage.k8s.io/pod.uid"]
	bucket := req.GetVolumeContext()["bucketName"]
	if podUID == "" || bucket == "" {
		return nil, status.Error(codes.InvalidArgument, "pod uid and bucketName are required")
	}
	pvName := filepath.Base(filepath.Dir(target))
	d.mu.Lock()
	defer d.mu.Unlock()
	if isMountS3(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	mp, err := attachedMountpointPod(ctx, pvName, req.GetVolumeId(), podUID)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	pod, err := runningPod(ctx, mp)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	source := filepath.Join(pluginDir(), "mnt", mp)
	if err := os.MkdirAll(source, 0o755); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !isMountS3(source) {
		if err := handOver2x(ctx, pod, source, bucket); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s: %v", target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver2x) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unix.Unmount(req.GetTargetPath(), 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	_ = os.Remove(req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// attachedMountpointPod polls the attachments every 2 s for the one naming the workload.
func attachedMountpointPod(ctx context.Context, pvName, volumeID, podUID string) (string, error) {
	for {
		var list crdv2.MountpointS3PodAttachmentList
		if err := env.c.List(ctx, &list); err != nil {
			return "", err
		}
		for _, a := range list.Items {
			if a.Spec.NodeName != rig.NodeName || a.Spec.PersistentVolumeName != pvName || a.Spec.VolumeID != volumeID {
				continue
			}
			for mp, ws := range a.Spec.MountpointS3PodAttachments {
				if slices.ContainsFunc(ws, func(w crdv2.WorkloadAttachment) bool { return w.WorkloadPodUID == podUID }) {
					return mp, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no attachment for workload %s: %w", podUID, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

func runningPod(ctx context.Context, name string) (*corev1.Pod, error) {
	for {
		var pod corev1.Pod
		err := env.c.Get(ctx, client.ObjectKey{Namespace: mpNamespace, Name: name}, &pod)
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			return &pod, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("Mountpoint Pod %s not Running (%v): %w", name, err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// handOver2x mounts FUSE at source and hands it to the Mountpoint Pod.
func handOver2x(ctx context.Context, pod *corev1.Pod, source, bucket string) error {
	comm := podcontract.CommHostPath(rig.KubeletDir, pod.UID)
	dir, err := confined.Open(comm)
	if err != nil {
		return err
	}
	defer dir.Close()
	credEnv, err := credentials.WriteProfileIn(dir, "credentials", "/comm/credentials",
		credentials.Credentials{AccessKeyID: rig.S3AccessKey, SecretAccessKey: rig.S3SecretKey}, podcontract.MountpointUID)
	if err != nil {
		return err
	}
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fuse.Close()
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", fuse.Fd())
	if err := unix.Mount(mounttable.FSName, source, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, opts); err != nil {
		return fmt.Errorf("mount FUSE at %s: %w", source, err)
	}
	o := mountoptions.Options{BucketName: bucket, Args: []string{"--allow-other", "--force-path-style"},
		Env: append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=" + rig.S3Endpoint()}, credEnv...)}
	sendCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := mountoptions.Send(sendCtx, filepath.Join(comm, mountoptions.SocketName), o, int(fuse.Fd())); err != nil {
		_ = unix.Unmount(source, unix.MNT_DETACH)
		return err
	}
	fuse.Close()
	served := make(chan error, 1)
	go func() { _, err := os.ReadDir(source); served <- err }()
	select {
	case err := <-served:
		if err != nil {
			_ = unix.Unmount(source, unix.MNT_DETACH)
		}
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("%s not served after a minute", source)
	}
}

// isMountS3 reports whether path is a mount-s3 mount (or a bind of one).
func isMountS3(path string) bool {
	entries, err := mounttable.Table{}.List()
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.MountPoint == path && e.Source == mounttable.FSName {
			return true
		}
	}
	return false
}

// controller2x plays 2.x's controller for workloads scheduled on the node (anchors §5.5, §6.2):
// one Mountpoint Pod mp-<SHA-224(first workload UID + PV name)> with 2.x's labels (no
// app.kubernetes.io/component, no annotations) and an attachment s3pa-<random> without
// authenticationSource listing them all. The pod runs this driver's image and mounter (there
// is no 2.x image here; both speak the comm protocol of §5.3), without 2.x's priority class.
func controller2x(t *testing.T, pvName, volumeID string, workloads ...*corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	mp := podcontract.MountpointPodName(string(workloads[0].UID), pvName)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: mp, Namespace: mpNamespace, Labels: map[string]string{
			"s3.csi.scality.com/mountpoint-version": "1.19.0",
			podcontract.LabelDriverVersion:          version2x,
			podcontract.LabelWorkloadUID:            string(workloads[0].UID),
			podcontract.LabelVolumeName:             pvName,
		}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{rig.NodeName}}}}}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000), RunAsUser: ptr.To[int64](1000),
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "mountpoint", Image: rig.DriverRepository + ":" + rig.DriverTag, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/scality-csi-mounter"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "comm", MountPath: "/comm"}},
			}},
			Volumes: []corev1.Volume{{Name: "comm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
	harness.Must(t, env.c.Create(ctx, pod))
	a := &crdv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "s3pa-", Labels: map[string]string{podcontract.LabelDriverVersion: version2x}},
		Spec:       crdv2.MountpointS3PodAttachmentSpec{NodeName: rig.NodeName, PersistentVolumeName: pvName, VolumeID: volumeID},
	}
	a.Spec.MountpointS3PodAttachments = map[string][]crdv2.WorkloadAttachment{}
	for _, w := range workloads {
		a.Spec.MountpointS3PodAttachments[mp] = append(a.Spec.MountpointS3PodAttachments[mp], crdv2.WorkloadAttachment{WorkloadPodUID: string(w.UID), AttachmentTime: metav1.Now()})
	}
	harness.Must(t, env.c.Create(ctx, a))
	return mp
}

// crd2x is 2.x's CRD as its chart's crds/ directory installs it (tests/helm/testdata/crd-2x).
func crd2x() string {
	return filepath.Join(harness.RepoRoot(), "tests", "helm", "testdata", "crd-2x", "mountpoints3podattachments.yaml")
}

// testUpgradeFrom2x installs the chart over a node Scality's driver 2.x serves in pod mode, with
// writers: the release's CRD is 2.x's (outside Helm), Running pods write through a 2.x
// Mountpoint Pod. One `helm upgrade --take-ownership` later the writers keep writing on the
// same mounts, kubelet's republish makes the node plugin record them, the controller keeps 2.x's
// attachment and Mountpoint Pod; `helm rollback` to the 2.x revision keeps the CRD and the
// attachments and the 2.x node plugin serves again; once the workloads leave, the 2.x
// Mountpoint Pod is retired, unmounted and deleted, and a new pod mounts through this driver's
// own Mountpoint Pod.
func testUpgradeFrom2x(t *testing.T) {
	expectClean(t)
	const crdName = "mountpoints3podattachments.s3.csi.scality.com"
	// The 2.x era: its CRD from crds/ (Helm never owns it), its release's objects (the same
	// selectors as 1.x's), its node plugin.
	mustRun(t)(helm(t, "uninstall", release, "-n", releaseNS, "--wait"))
	waitCSINode(t, false)
	mustRun(t)(kubectl(t, "delete", "crd", crdName, "--ignore-not-found", "--wait"))
	mustRun(t)(kubectl(t, "apply", "-f", crd2x()))
	mustRun(t)(kubectl(t, "wait", "--for=condition=Established", "crd/"+crdName, "--timeout=1m"))
	install1xRelease(t)
	mustRun(t)(kubectl(t, "label", "node", rig.NodeName, "s3.csi.scality.com/mounter=pod", "--overwrite"))
	old := startDriver2x(t)

	ns := newNamespace(t, "from2x")
	bucket := "from2x-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	var pvc corev1.PersistentVolumeClaim
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: claim}, &pvc))
	var pv corev1.PersistentVolume
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv))
	pods := []*corev1.Pod{workload(t, ns, "a", claim, podOpts{}), workload(t, ns, "b", claim, podOpts{})}
	mp := controller2x(t, pv.Name, pv.Spec.CSI.VolumeHandle, pods...)
	waitRunning(t, 3*time.Minute, pods...)
	for _, p := range pods {
		mustRun(t)(execIn(t, p, "printf '2.x\\n' > /data/before-"+p.Name))
	}
	source := filepath.Join(pluginDir(), "mnt", mp)
	if !isMountS3(source) {
		t.Fatalf("the 2.x plugin did not mount %s", source)
	}

	// The upgrade: one command, the CRD adopted.
	old.stop()
	installChart(t, "--take-ownership")
	waitNodeMode(t, "pod")
	expect1xSelectors(t)
	if out := mustRun(t)(kubectl(t, "get", "crd", crdName, "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by}")); out != "Helm" {
		t.Errorf("CRD managed-by %q after the upgrade, want Helm (adopted)", out)
	}
	// kubelet republishes each volume within its sync period: the node plugin records the 2.x
	// mounts as its own (it can repair them from then on).
	records := filepath.Join(pluginDir(), "pod", "targets")
	waitFor(t, 2*time.Minute, "kubelet's republish of the 2.x volumes", func() string {
		if m, _ := filepath.Glob(filepath.Join(records, "*.json")); len(m) != 2 {
			n := len(m)
			return fmt.Sprintf("%d target records, want 2", n)
		}
		return ""
	})
	expect2x := func(when string) {
		t.Helper()
		s := currentState(t)
		if !slices.Equal(s.mpPods, []string{mp}) || len(s.attachments) != 1 {
			t.Errorf("%s: %s, want the 2.x Mountpoint Pod and attachment alone", when, s)
		}
		for _, p := range pods {
			name := "after-" + when + "-" + p.Name
			out := mustRun(t)(execIn(t, p, "cat /data/before-"+p.Name+" && printf 'ok\\n' > /data/"+name))
			if !strings.Contains(out, "2.x") {
				t.Errorf("%s reads %q %s", p.Name, out, when)
			}
			if got := string(env.s3.GetObject(t, bucket, name)); got != "ok\n" {
				t.Errorf("%s wrote %q %s", p.Name, got, when)
			}
			if n := containerRestarts(t, p); n != 0 {
				t.Errorf("%s restarted %d times", p.Name, n)
			}
		}
	}
	expect2x("upgrade")

	// helm rollback to the 2.x revision: the CRD and the attachments stay, the 2.x node plugin
	// serves the same mounts again. Then the upgrade again.
	mustRun(t)(helm(t, "rollback", release, "1", "-n", releaseNS))
	waitCSINode(t, false)
	mustRun(t)(kubectl(t, "get", "crd", crdName))
	old = startDriver2x(t)
	expect2x("rollback")
	old.stop()
	installChart(t, "--take-ownership")
	waitNodeMode(t, "pod")
	expect2x("upgrade-again")

	// They leave: the 2.x Mountpoint Pod is retired, its mount taken down, the pod deleted.
	deletePods(t, pods...)
	expectClean(t)

	// A new pod of the volume mounts through this driver's own Mountpoint Pod.
	p := workload(t, ns, "new", claim, podOpts{})
	waitRunning(t, 2*time.Minute, p)
	if s := currentState(t); len(s.mpPods) != 1 || s.mpPods[0] == mp {
		t.Errorf("a new pod after the 2.x ones left: %s", s)
	}
	if !strings.Contains(mustRun(t)(execIn(t, p, "cat /data/after-upgrade-a")), "ok") {
		t.Error("the new pod does not read what a 2.x-mounted pod wrote")
	}
	deletePods(t, p)
	expectClean(t)
	setMode(t, "systemd")
}
