package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/mountertest"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
)

type testNode struct {
	kubelet string
	fake    *mountertest.Fake
	node    csi.NodeClient
	ident   csi.IdentityClient
	socket  string
}

var driverCreds = &credentials.Credentials{AccessKeyID: "DRIVERKEY", SecretAccessKey: "driversecret"}

// startNode serves the Node and Identity services over a real Unix socket with a fake mounter.
func startNode(t *testing.T, creds *credentials.Credentials, checker Checker) *testNode {
	return startNodeWith(t, creds, checker, nil)
}

// startNodeWith is startNode with a secret scope check.
func startNodeWith(t *testing.T, creds *credentials.Credentials, checker Checker, scope SecretScope) *testNode {
	t.Helper()
	dir := t.TempDir()
	tn := &testNode{kubelet: filepath.Join(dir, "kubelet"), fake: &mountertest.Fake{}, socket: filepath.Join(dir, "csi", "csi.sock")}
	ns, err := NewNodeServer(NodeConfig{NodeID: "node-1", MaxVolumesPerNode: 7, KubeletPath: tn.kubelet, S3Region: "us-east-1", S3EndpointURL: "http://s3.example:8000",
		DriverCredentials: creds, SecretScope: scope}, tn.fake)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer("unix://" + tn.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterNode(ns)
	srv.RegisterIdentity(NewIdentityServer(false, checker))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(tn.socket); err == nil {
			break
		}
		if i > 200 {
			t.Fatal("socket not created")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+tn.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tn.node, tn.ident = csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	return tn
}

func (tn *testNode) target(pod string) string {
	return filepath.Join(tn.kubelet, "pods", pod, "volumes", "kubernetes.io~csi", "pv-1", "mount")
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func (tn *testNode) publishReq(pod string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:         "vol-1",
		TargetPath:       tn.target(pod),
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		VolumeContext:    map[string]string{"bucketName": "my-bucket"},
	}
}

func TestSocketMode(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	st, err := os.Stat(tn.socket)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want 0600 (owner only)", st.Mode().Perm())
	}
}

func TestPublishBuildsRequest(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	req := tn.publishReq("pod-a")
	req.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "allow-delete", "--aws-max-attempts=4")
	req.VolumeCapability.GetMount().VolumeMountGroup = "3000"
	req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = "team-a"
	if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got, ok := tn.fake.Mounted(req.TargetPath)
	if !ok {
		t.Fatal("nothing mounted")
	}
	want := []string{"--allow-delete", "--allow-other", "--dir-mode=770", "--file-mode=660", "--force-path-style", "--gid=3000", "--read-only", "--user-agent-prefix=s3.csi.scality.com/dev credential-source#driver"}
	if diff := cmp.Diff(want, got.Args.List()); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=http://s3.example:8000", "AWS_MAX_ATTEMPTS=4"}, got.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if got.Credentials != driverCreds || !got.ReadOnly || got.FSGroup != "3000" || got.Bucket != "my-bucket" || got.PVName != "pv-1" || got.WorkloadPodUID != "pod-a" || got.WorkloadNamespace != "team-a" {
		t.Errorf("request = %+v", got)
	}
}

// TestPublishAccessModes: every filesystem access mode Kubernetes can ask for mounts; the
// read-only ones mount read-only for every workload.
func TestPublishAccessModes(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	for i, tc := range []struct {
		mode     csi.VolumeCapability_AccessMode_Mode
		readOnly bool
	}{
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, true},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, true},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, false},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			req := tn.publishReq(fmt.Sprintf("pod-%d", i))
			req.VolumeCapability = mountCap(tc.mode)
			if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			got, ok := tn.fake.Mounted(req.TargetPath)
			if !ok {
				t.Fatal("nothing mounted")
			}
			if got.ReadOnly != tc.readOnly || got.VolumeReadOnly != tc.readOnly || got.Args.Has("read-only") != tc.readOnly {
				t.Errorf("readOnly=%t volumeReadOnly=%t --read-only=%t, want all %t", got.ReadOnly, got.VolumeReadOnly, got.Args.Has("read-only"), tc.readOnly)
			}
		})
	}
}

func TestPublishSecretSource(t *testing.T) {
	tn := startNode(t, nil, nil)
	req := tn.publishReq("pod-a")
	req.VolumeContext["authenticationSource"] = "secret"
	req.Secrets = map[string]string{"access_key_id": "VOLKEY", "secret_access_key": "volsecret"}
	if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got, _ := tn.fake.Mounted(req.TargetPath)
	if got.Credentials == nil || got.Credentials.AccessKeyID != "VOLKEY" || !strings.Contains(strings.Join(got.Args.List(), " "), "credential-source#secret") {
		t.Errorf("request = %+v", got)
	}
}

// scopeFunc is a SecretScope from a function; it records what it was asked.
type scopeFunc struct {
	f     func(secretscope.Publish) error
	asked []secretscope.Publish
}

func (s *scopeFunc) Check(_ context.Context, p secretscope.Publish) error {
	s.asked = append(s.asked, p)
	return s.f(p)
}

// TestPublishSecretScope: a publish with a node-publish Secret is checked (PV name from the
// target path, the workload's namespace) and, when refused, is PermissionDenied with the reason
// and mounts nothing; a publish with the driver's credentials is not checked.
func TestPublishSecretScope(t *testing.T) {
	scope := &scopeFunc{f: func(p secretscope.Publish) error {
		if p.PodNamespace == "team-b" {
			return fmt.Errorf("%w: secret team-a/creds, claim in team-b", secretscope.ErrRefused)
		}
		return nil
	}}
	tn := startNodeWith(t, driverCreds, nil, scope)
	secretReq := func(pod, ns string) *csi.NodePublishVolumeRequest {
		req := tn.publishReq(pod)
		req.VolumeContext["authenticationSource"] = "secret"
		req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = ns
		req.Secrets = map[string]string{"access_key_id": "VOLKEY", "secret_access_key": "volsecret"}
		return req
	}
	_, err := tn.node.NodePublishVolume(context.Background(), secretReq("pod-b", "team-b"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "secrets: node-publish secret refused: secret team-a/creds, claim in team-b") {
		t.Errorf("refused publish: %v, want PermissionDenied naming both namespaces", err)
	}
	if strings.Contains(fmt.Sprint(err), "volsecret") {
		t.Errorf("the error shows the secret: %v", err)
	}
	if _, ok := tn.fake.Mounted(tn.target("pod-b")); ok || len(tn.fake.Calls()) != 0 {
		t.Errorf("a refused publish reached the mounter: %v", tn.fake.Calls())
	}
	if _, err := tn.node.NodePublishVolume(context.Background(), secretReq("pod-a", "team-a")); err != nil {
		t.Errorf("allowed publish: %v", err)
	}
	want := []secretscope.Publish{{PVName: "pv-1", VolumeID: "vol-1", PodNamespace: "team-b"}, {PVName: "pv-1", VolumeID: "vol-1", PodNamespace: "team-a"}}
	if diff := cmp.Diff(want, scope.asked); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	// The driver's credentials: nothing to check.
	req := tn.publishReq("pod-c")
	req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = "team-b"
	if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
		t.Errorf("publish with the driver's credentials: %v", err)
	}
	if len(scope.asked) != 2 {
		t.Errorf("a publish with the driver's credentials was checked: %v", scope.asked)
	}
	// A bad scope attribute is the caller's error, before any check.
	req = secretReq("pod-d", "team-a")
	req.VolumeContext["nodePublishSecretScope"] = "everyone"
	if _, err := tn.node.NodePublishVolume(context.Background(), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "volume_context.nodePublishSecretScope") {
		t.Errorf("bad scope attribute: %v", err)
	}
}

func TestPublishRefusals(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	tests := []struct {
		name   string
		mutate func(*csi.NodePublishVolumeRequest)
		code   codes.Code
		field  string
	}{
		{"no volume id", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, codes.InvalidArgument, "volume_id"},
		{"no target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, codes.InvalidArgument, "target_path"},
		{"no capability", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }, codes.InvalidArgument, "volume_capability"},
		{"block", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}, codes.InvalidArgument, "volume_capability.access_type"},
		{"multi node single writer", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
		}, codes.InvalidArgument, "volume_capability.access_mode"},
		{"unknown access mode", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_UNKNOWN
		}, codes.InvalidArgument, "volume_capability.access_mode"},
		{"no bucket", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, "bucketName") }, codes.InvalidArgument, "volume_context.bucketName"},
		{"bad bucket", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "Bad_Bucket" }, codes.InvalidArgument, "volume_context.bucketName"},
		{"bad auth source", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["authenticationSource"] = "pod" }, codes.InvalidArgument, "volume_context.authenticationSource"},
		{"secret source without secrets", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["authenticationSource"] = "secret" }, codes.InvalidArgument, "secrets"},
		{"forbidden option", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"endpoint-url=http://x"}
		}, codes.InvalidArgument, "volume_capability.mount.mount_flags"},
		{"bad fsGroup", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().VolumeMountGroup = "wheel" }, codes.InvalidArgument, "volume_capability.mount.volume_mount_group"},
		{"bad fsType", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().FsType = "ext4;rm" }, codes.InvalidArgument, "volume_capability.mount.fs_type"},
		{"bad pod uid", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["csi.storage.k8s.io/pod.uid"] = "../x" }, codes.InvalidArgument, "volume_context.csi.storage.k8s.io/pod.uid"},
		{"target outside kubelet", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "/etc" }, codes.InvalidArgument, "target_path"},
		{"memory limit not a quantity", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["mountpointMemoryLimit"] = "lots" }, codes.InvalidArgument, "volume_context"},
		{"request above limit", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["mountpointCPURequest"], r.VolumeContext["mountpointCPULimit"] = "2", "1"
		}, codes.InvalidArgument, "volume_context"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tn.publishReq("pod-x")
			tc.mutate(req)
			_, err := tn.node.NodePublishVolume(context.Background(), req)
			if status.Code(err) != tc.code || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("err = %v, want %v naming %q", err, tc.code, tc.field)
			}
		})
	}
	if calls := tn.fake.Calls(); len(calls) != 0 {
		t.Errorf("mounter was called for invalid requests: %v", calls)
	}
}

func TestPublishWithoutDriverCredentials(t *testing.T) {
	tn := startNode(t, nil, nil)
	_, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-a"))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err = %v, want FailedPrecondition", err)
	}
	req := tn.publishReq("pod-a")
	req.VolumeCapability.GetMount().MountFlags = []string{"no-sign-request"}
	if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatalf("anonymous publish: %v", err)
	}
}

func TestConcurrentOperationsOnOneTarget(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tn.fake.MountHook = func(ctx context.Context, req mounter.Request) error {
		if strings.Contains(req.Target, "pod-slow") {
			once.Do(func() { close(entered) })
			<-unblock
		}
		return nil
	}
	errCh := make(chan error, 1)
	go func() {
		_, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-slow"))
		errCh <- err
	}()
	<-entered
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-slow")); status.Code(err) != codes.Aborted {
		t.Errorf("second publish on a busy target: %v, want Aborted", err)
	}
	if _, err := tn.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: tn.target("pod-slow")}); status.Code(err) != codes.Aborted {
		t.Errorf("unpublish on a busy target: %v, want Aborted", err)
	}
	// Another target is not blocked by the busy one.
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-other")); err != nil {
		t.Errorf("publish on another target: %v", err)
	}
	close(unblock)
	if err := <-errCh; err != nil {
		t.Fatal(err)
	}
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-slow")); err != nil {
		t.Errorf("publish after release: %v", err)
	}
}

func TestMounterErrorsMapped(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	tn.fake.MountHook = func(context.Context, mounter.Request) error { return mounter.ErrUnavailable }
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-a")); status.Code(err) != codes.Unavailable {
		t.Errorf("err = %v, want Unavailable", err)
	}
	tn.fake.MountHook = nil
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-a")); err != nil {
		t.Fatal(err)
	}
	other := tn.publishReq("pod-a")
	other.VolumeId = "vol-2"
	if _, err := tn.node.NodePublishVolume(context.Background(), other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("different volume at a used target: %v, want AlreadyExists", err)
	}
}

func TestUnpublish(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	if _, err := tn.node.NodePublishVolume(context.Background(), tn.publishReq("pod-a")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req   *csi.NodeUnpublishVolumeRequest
		field string
	}{
		{&csi.NodeUnpublishVolumeRequest{TargetPath: tn.target("pod-a")}, "volume_id"},
		{&csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1"}, "target_path"},
		{&csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: tn.kubelet + "/pods/../../etc"}, "target_path"},
	} {
		if _, err := tn.node.NodeUnpublishVolume(context.Background(), tc.req); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
			t.Errorf("Unpublish(%v) = %v, want InvalidArgument naming %s", tc.req, err, tc.field)
		}
	}
	for i := 0; i < 2; i++ { // idempotent
		if _, err := tn.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: tn.target("pod-a")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := tn.fake.Mounted(tn.target("pod-a")); ok {
		t.Error("still mounted")
	}
}

func TestInfoAndCapabilities(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	info, err := tn.node.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.NodeId != "node-1" || info.MaxVolumesPerNode != 7 {
		t.Errorf("NodeGetInfo = %v, %v", info, err)
	}
	caps, err := tn.node.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	want := []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("NodeGetCapabilities = %v, %v; want %v", got, err, want)
	}
	if _, err := tn.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("NodeStageVolume = %v, want Unimplemented", err)
	}
}

type checkerFunc func(context.Context) error

func (f checkerFunc) Check(ctx context.Context) error { return f(ctx) }

func TestIdentity(t *testing.T) {
	var healthy = true
	var mu sync.Mutex
	tn := startNode(t, driverCreds, checkerFunc(func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return nil
		}
		return mounter.ErrUnavailable
	}))
	info, err := tn.ident.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || info.Name != "s3.csi.scality.com" || info.VendorVersion == "" {
		t.Errorf("GetPluginInfo = %v, %v", info, err)
	}
	caps, err := tn.ident.GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 0 {
		t.Errorf("node mode capabilities = %v, %v", caps, err)
	}
	p, err := tn.ident.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !p.GetReady().GetValue() {
		t.Errorf("Probe healthy = %v, %v", p, err)
	}
	mu.Lock()
	healthy = false
	mu.Unlock()
	p, err = tn.ident.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || p.GetReady().GetValue() {
		t.Errorf("Probe unhealthy = %v, %v; want ready=false", p, err)
	}
}

// TestPublishResources: the volume's resource attributes reach the mounter, over no defaults.
func TestPublishResources(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	req := tn.publishReq("pod-r")
	req.VolumeContext["mountpointMemoryLimit"] = "1Gi"
	req.VolumeContext["mountpointCPURequest"] = "250m"
	if _, err := tn.node.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got, ok := tn.fake.Mounted(req.TargetPath)
	if !ok {
		t.Fatal("not mounted")
	}
	if l := got.Resources.Limits[corev1.ResourceMemory]; l.String() != "1Gi" || len(got.Resources.Limits) != 1 {
		t.Errorf("limits %v, want memory 1Gi", got.Resources.Limits)
	}
	if r := got.Resources.Requests[corev1.ResourceCPU]; r.String() != "250m" || len(got.Resources.Requests) != 1 {
		t.Errorf("requests %v, want cpu 250m", got.Resources.Requests)
	}
}

// TestPublishMemoryTarget: under a memory limit mount-s3 gets --memory-target = the limit less
// a quarter (at least 128 MiB), at least 512; a volume's own memory-target is kept up to the
// limit and refused above it; without a limit none is set (mount-s3's own default); a read part
// above the target's data buffers is refused.
func TestPublishMemoryTarget(t *testing.T) {
	tn := startNode(t, driverCreds, nil)
	for i, c := range []struct {
		limit   string
		flags   []string
		want    string // --memory-target=<want>, "" for none
		wantErr string
	}{
		{limit: "1Gi", want: "768"},
		{limit: "640Mi", want: "512"},
		{limit: "8Gi", want: "6144"},
		{want: ""},
		{limit: "1Gi", flags: []string{"memory-target=1024"}, want: "1024"},
		{limit: "1Gi", flags: []string{"memory-target=2048"}, wantErr: "above the mount's memory limit (1024 MiB)"},
		{limit: "600Mi", wantErr: "below the 640Mi mount-s3 needs"},
		{limit: "640Mi", flags: []string{"read-part-size=536870912"}, wantErr: "exceeds the 384 MiB"},
		{flags: []string{"memory-target=600"}, want: "600"},
	} {
		req := tn.publishReq(fmt.Sprintf("pod-m%d", i))
		if c.limit != "" {
			req.VolumeContext["mountpointMemoryLimit"] = c.limit
		}
		req.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, c.flags...)
		_, err := tn.node.NodePublishVolume(context.Background(), req)
		if c.wantErr != "" {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("limit %q flags %q: %v, want InvalidArgument with %q", c.limit, c.flags, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("limit %q flags %q: %v", c.limit, c.flags, err)
		}
		got, _ := tn.fake.Mounted(req.TargetPath)
		v, ok := got.Args.Get("memory-target")
		if c.want == "" && ok || c.want != "" && v != c.want {
			t.Errorf("limit %q flags %q: --memory-target=%q (set: %v), want %q", c.limit, c.flags, v, ok, c.want)
		}
	}
}
