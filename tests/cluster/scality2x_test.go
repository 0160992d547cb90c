package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
	"github.com/s3csi/s3-csi-driver/tests/scality"
)

// driver2x plays the node plugin of one of Scality's 2.x releases (pod mode) on the rig's
// node, at every boundary this driver meets when it takes the node over
// (tests/scality/SOURCES.md §2.x node):
//   - no node capability, so kubelet sends no volume mount group; NodeGetInfo the node name;
//   - publish: the workload's attachment, polled every 2 s for 2 minutes, by spec.nodeName,
//     spec.persistentVolumeName (from the target path) and spec.volumeID, plus, in 2.0.0 only,
//     spec.workloadFSGroup = "" (kubelet never sends it), then the workload's UID in its map;
//     the Mountpoint Pod Running on the node; the driver's credentials written into the pod's
//     comm directory (credentials/, 0750; <podUID>-<volumeID>-s3-csi-config and -credentials,
//     0640, by rename) at every publish, or, for a volume with authenticationSource: secret,
//     the Secret's two keys (checked as the release does) as environment variables; unless <kubelet>/plugins/s3.csi.scality.com/mnt/<pod>
//     is mounted already: /dev/fuse mounted there (source mountpoint-s3, MS_NODEV|MS_NOSUID|
//     MS_NOATIME, fd=,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other),
//     the options and the fd sent over comm/mount.sock (JSON bucketName, args, env, sorted;
//     --allow-root without --allow-other, --force-path-style, --user-agent-prefix, the PV's
//     options, never --read-only), then comm/mount.err or the mount awaited, every second;
//     then a plain bind of the source at the target;
//   - unpublish: the bind unmounted, nothing else (the Mountpoint Pod is retired by the
//     controller's needs-unmount, which the node then serves; not needed before the takeover).
//
// The Mountpoint Pods are controller2x's. It runs in this test process, from the release's era
// of a node until the chart takes over.
type driver2x struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	r      scality.Release
	cfg    nodeEnv
	server *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // one publish at a time (2.x locks per Mountpoint Pod)
}

// startDriver2x starts the release's node plugin and waits until kubelet lists it in CSINode.
func startDriver2x(t *testing.T, r scality.Release) *driver2x {
	t.Helper()
	d := &driver2x{r: r, cfg: scalityNodeEnv(t), done: make(chan struct{})}
	harness.Must(t, os.MkdirAll(pluginDir(), 0o750))
	d.server, d.cancel = serveNodePlugin(t, d, d, d.done)
	t.Cleanup(d.stop)
	return d
}

// stop is the release's DaemonSet going away: the mounts, Mountpoint Pods and attachments stay.
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
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: d.r.DriverVersion()}, nil
}

func (d *driver2x) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{
		Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}}}}, nil
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
	target, bucket := req.GetTargetPath(), req.GetVolumeContext()["bucketName"]
	podUID := req.GetVolumeContext()["csi.storage.k8s.io/pod.uid"]
	if req.GetVolumeId() == "" || target == "" || bucket == "" || podUID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id, target path, bucketName and pod uid are required")
	}
	pvName := filepath.Base(filepath.Dir(target))
	d.mu.Lock()
	defer d.mu.Unlock()
	mp, err := d.attachedMountpointPod(ctx, pvName, req.GetVolumeId(), podUID)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	pod, err := runningPod(ctx, mp)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	comm := podcontract.CommHostPath(rig.KubeletDir, pod.UID)
	var credEnv []string
	if req.GetVolumeContext()["authenticationSource"] == "secret" && len(req.GetSecrets()) > 0 {
		// A volume's Secret: its two keys as mount-s3's environment, no file.
		key, secret := strings.TrimSpace(req.GetSecrets()["access_key_id"]), strings.TrimSpace(req.GetSecrets()["secret_access_key"])
		if !d.r.SecretKeysAccepted(key, secret) {
			return nil, status.Error(codes.InvalidArgument, "missing or invalid keys in the node-publish secret")
		}
		credEnv = []string{"AWS_ACCESS_KEY_ID=" + key, "AWS_SECRET_ACCESS_KEY=" + secret}
	} else if credEnv, err = d.writeCredentials(comm, podUID, req.GetVolumeId()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	source := filepath.Join(pluginDir(), "mnt", mp)
	if err := os.MkdirAll(source, 0o755); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !isMountS3(source) {
		args := map[string]bool{"--allow-root": true, "--force-path-style": true,
			"--user-agent-prefix=s3-csi-driver/" + d.r.DriverVersion() + " credential-source#driver": true}
		for _, o := range req.GetVolumeCapability().GetMount().GetMountFlags() {
			a := "--" + strings.TrimLeft(strings.TrimSpace(o), "-")
			switch strings.SplitN(a, "=", 2)[0] {
			case "--read-only", "--profile", "--endpoint-url", "--cache-xz", "--incremental-upload", "--storage-class":
				continue
			case "--allow-other":
				delete(args, "--allow-root")
			}
			args[a] = true
		}
		var argv []string
		for a := range args {
			argv = append(argv, a)
		}
		sort.Strings(argv)
		environment := append([]string{"AWS_ENDPOINT_URL=" + d.cfg.endpoint, "AWS_REGION=" + d.cfg.region}, credEnv...)
		sort.Strings(environment)
		if err := handOver2x(ctx, comm, source, mountoptions.Options{BucketName: bucket, Args: argv, Env: environment}); err != nil {
			return nil, status.Errorf(codes.Internal, "Could not mount %q at %q: %v", bucket, target, err)
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !isMountS3(target) {
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return nil, status.Errorf(codes.Internal, "bind %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver2x) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unix.Unmount(req.GetTargetPath(), 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// writeCredentials writes the driver's credentials into the Mountpoint Pod's comm directory as
// 2.x does and returns the variables that point mount-s3 at them.
func (d *driver2x) writeCredentials(comm, podUID, volumeID string) ([]string, error) {
	dir := filepath.Join(comm, "credentials")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	cfgName, credsName, profile := credentialFiles1x(podUID, volumeID) // the same names in 2.x
	if err := errors.Join(writeFile1x(filepath.Join(dir, cfgName), "[profile "+profile+"]\n"),
		writeFile1x(filepath.Join(dir, credsName), "["+profile+"]\naws_access_key_id="+d.cfg.accessKey+"\naws_secret_access_key="+d.cfg.secretKey+"\n")); err != nil {
		return nil, err
	}
	return []string{"AWS_PROFILE=" + profile, "AWS_CONFIG_FILE=/comm/credentials/" + cfgName, "AWS_SHARED_CREDENTIALS_FILE=/comm/credentials/" + credsName}, nil
}

// attachedMountpointPod polls the attachments every 2 s, for 2 minutes, for the one naming
// the workload.
func (d *driver2x) attachedMountpointPod(ctx context.Context, pvName, volumeID, podUID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "s3.csi.scality.com", Version: "v2", Kind: "MountpointS3PodAttachmentList"})
		if err := env.c.List(ctx, &list); err != nil {
			return "", err
		}
		for _, a := range list.Items {
			spec, _ := a.Object["spec"].(map[string]any)
			if spec["nodeName"] != rig.NodeName || spec["persistentVolumeName"] != pvName || spec["volumeID"] != volumeID {
				continue
			}
			if d.r == scality.R200 && spec["workloadFSGroup"] != "" {
				continue
			}
			pods, _ := spec["mountpointS3PodAttachments"].(map[string]any)
			for mp, ws := range pods {
				for _, w := range ws.([]any) {
					if w.(map[string]any)["workloadPodUID"] == podUID {
						return mp, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("timed out waiting for MountpointS3PodAttachment: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

func runningPod(ctx context.Context, name string) (*corev1.Pod, error) {
	for {
		var pod corev1.Pod
		err := env.c.Get(ctx, client.ObjectKey{Namespace: mpNamespace, Name: name}, &pod)
		if err == nil && pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == rig.NodeName {
			return &pod, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("mppod/watcher: mountpoint pod not ready: %s (%v)", name, err)
		case <-time.After(time.Second):
		}
	}
}

// handOver2x mounts FUSE at source and hands it to the Mountpoint Pod, as 2.x does, then waits
// for comm/mount.err or the mount, polling every second.
func handOver2x(ctx context.Context, comm, source string, o mountoptions.Options) error {
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fuse.Close()
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", fuse.Fd())
	if err := unix.Mount(mounttable.FSName, source, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, opts); err != nil {
		return fmt.Errorf("mount FUSE at %s: %w", source, err)
	}
	_ = os.Remove(filepath.Join(comm, "mount.err"))
	sendCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := mountoptions.Send(sendCtx, filepath.Join(comm, mountoptions.SocketName), o, int(fuse.Fd())); err != nil {
		_ = unix.Unmount(source, unix.MNT_DETACH)
		return err
	}
	fuse.Close()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if b, err := os.ReadFile(filepath.Join(comm, "mount.err")); err == nil {
			_ = unix.Unmount(source, unix.MNT_DETACH)
			return fmt.Errorf("mountpoint Pod failed: %s", b)
		}
		if served(source) {
			return nil
		}
	}
	_ = unix.Unmount(source, unix.MNT_DETACH)
	return fmt.Errorf("%s not served after a minute", source)
}

// served reports whether the FUSE mount at path answers (a directory listing within 2 s).
func served(path string) bool {
	done := make(chan error, 1)
	go func() { _, err := os.ReadDir(path); done <- err }()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(2 * time.Second):
		return false
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

// controller2x plays the release's controller for workloads of one PV on the node: one
// Mountpoint Pod named after the first workload (scality.MountpointPod: 2.x's labels and spec;
// the container runs this driver's scality-csi-mounter, which speaks 2.x's hand-over protocol,
// there being no 2.x image here) and one attachment listing them all. With the release's CA
// (2.2.0, caConfigMap), the pod's init container reads that ConfigMap as 2.x's does.
func controller2x(t *testing.T, r scality.Release, pv *corev1.PersistentVolume, caConfigMap string, workloads ...*corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	mp := podcontract.MountpointPodName(string(workloads[0].UID), pv.Name)
	m := scality.MountpointPod{Name: mp, Node: rig.NodeName, WorkloadUID: string(workloads[0].UID), PV: pv.Name,
		Image: rig.DriverRepository + ":" + rig.DriverTag, Command: "/bin/scality-csi-mounter", CAConfigMap: caConfigMap,
		InitImage: rig.BusyboxImage, InitCommand: []string{"sh", "-c", "cat /custom-ca/ca-bundle.crt > /shared-certs/ca-certificates.crt"}}
	harness.Must(t, env.c.Create(ctx, m.Pod(r)))
	var ws []scality.Workload
	for _, w := range workloads {
		ws = append(ws, scality.Workload{UID: string(w.UID), Time: time.Now()})
	}
	harness.Must(t, env.c.Create(ctx, scality.Attachment(r, rig.NodeName, pv.Name, pv.Spec.CSI.VolumeHandle, pv.Spec.MountOptions, "", mp, ws...)))
	return mp
}
