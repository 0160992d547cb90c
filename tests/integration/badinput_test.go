package integration

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestHostileRequests sends malformed and hostile requests to the real driver process. Each
// must fail with InvalidArgument and a message that starts with the offending field, before
// anything is created: no unit, no state file, no directory, no mount.
func TestHostileRequests(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "victim")
	good := s.target("pod-ok")
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(s.kubelet, "pods", "escape")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, s.kubelet)

	pub := func(mutate func(*csi.NodePublishVolumeRequest)) *csi.NodePublishVolumeRequest {
		r := rw(good, "victim")
		mutate(r)
		return r
	}
	withFlags := func(flags ...string) *csi.NodePublishVolumeRequest {
		return pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().MountFlags = flags })
	}
	withSecret := func(secrets map[string]string) *csi.NodePublishVolumeRequest {
		return pub(func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["authenticationSource"] = "secret"
			r.Secrets = secrets
		})
	}
	manyKeys := map[string]string{"bucketName": "victim"}
	for i := 0; i < 70; i++ {
		manyKeys[strings.Repeat("k", i+1)] = "v"
	}
	tooManyFlags := make([]string, 65)
	for i := range tooManyFlags {
		tooManyFlags[i] = "allow-delete"
	}
	publishes := []struct {
		name  string
		req   *csi.NodePublishVolumeRequest
		field string
	}{
		{"missing volume id", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }), "volume_id"},
		{"oversized volume id", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = strings.Repeat("v", 2000) }), "volume_id"},
		{"newline in volume id", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "vol\n[x]" }), "volume_id"},
		{"missing target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }), "target_path"},
		{"relative target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "pods/x/mount" }), "target_path"},
		{"traversal target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = s.kubelet + "/pods/x/../../../etc/mount" }), "target_path"},
		{"target outside kubelet", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "/etc/cron.d/s3" }), "target_path"},
		{"kubelet root as target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = s.kubelet }), "target_path"},
		{"NUL in target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = good + "\x00x" }), "target_path"},
		{"oversized target", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = s.kubelet + "/pods/" + strings.Repeat("a", 5000) }), "target_path"},
		{"symlink escaping kubelet", pub(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = s.kubelet + "/pods/escape/mount" }), "target_path"},
		{"missing capability", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }), "volume_capability"},
		{"block volume", pub(func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}), "volume_capability.access_type"},
		{"single-node writer", pub(func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
		}), "volume_capability.access_mode"},
		{"missing bucket", pub(func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, "bucketName") }), "volume_context.bucketName"},
		{"uppercase bucket", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "Victim" }), "volume_context.bucketName"},
		{"bucket with path", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "victim/../other" }), "volume_context.bucketName"},
		{"bucket too long", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = strings.Repeat("b", 64) }), "volume_context.bucketName"},
		{"bucket is an IP", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "192.168.1.1" }), "volume_context.bucketName"},
		{"bucket starting with option", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "--endpoint-url=x" }), "volume_context.bucketName"},
		{"unknown authentication source", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["authenticationSource"] = "pod" }), "volume_context.authenticationSource"},
		{"too many context keys", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext = manyKeys }), "volume_context"},
		{"hostile pod uid", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["csi.storage.k8s.io/pod.uid"] = "../../etc" }), "volume_context.csi.storage.k8s.io/pod.uid"},
		{"endpoint override", withFlags("--endpoint-url=http://attacker:9000"), "volume_capability.mount.mount_flags"},
		{"profile override", withFlags("profile=admin"), "volume_capability.mount.mount_flags"},
		{"shell substitution", withFlags("--prefix=$(reboot)/"), "volume_capability.mount.mount_flags"},
		{"newline injection", withFlags("allow-delete\n--endpoint-url=http://x"), "volume_capability.mount.mount_flags"},
		{"unknown option", withFlags("--exec=/bin/sh"), "volume_capability.mount.mount_flags"},
		{"fstab -o", withFlags("-o allow_other"), "volume_capability.mount.mount_flags"},
		{"foreground", withFlags("-f"), "volume_capability.mount.mount_flags"},
		{"too many options", withFlags(tooManyFlags...), "volume_capability.mount.mount_flags"},
		{"oversized option", withFlags("--prefix=" + strings.Repeat("p", 2000) + "/"), "volume_capability.mount.mount_flags"},
		{"cache path traversal", withFlags("--cache=/var/../etc"), "volume_capability.mount.mount_flags"},
		{"bad uid", withFlags("uid=-1"), "volume_capability.mount.mount_flags"},
		{"bad fsGroup", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().VolumeMountGroup = "0" }), "volume_capability.mount.volume_mount_group"},
		{"bad fs type", pub(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().FsType = "ext4 -o x" }), "volume_capability.mount.fs_type"},
		{"secret source without secrets", withSecret(nil), "secrets"},
		{"secret missing secret key", withSecret(map[string]string{"access_key_id": "AKIA"}), "secrets"},
		{"secret profile injection", withSecret(map[string]string{"access_key_id": "AKIA\n[profile other]", "secret_access_key": "s"}), "secrets"},
		{"secret oversized", withSecret(map[string]string{"access_key_id": "AKIA", "secret_access_key": strings.Repeat("s", 300)}), "secrets"},
		{"secret unknown key", withSecret(map[string]string{"access_key_id": "AKIA", "secret_access_key": "s", "aws_secret": "x"}), "secrets"},
	}
	for _, tc := range publishes {
		t.Run("publish/"+tc.name, func(t *testing.T) {
			_, err := s.drv.Node.NodePublishVolume(context.Background(), tc.req)
			expectInvalid(t, err, tc.field)
		})
	}
	unpublishes := []struct {
		name  string
		req   *csi.NodeUnpublishVolumeRequest
		field string
	}{
		{"missing volume id", &csi.NodeUnpublishVolumeRequest{TargetPath: good}, "volume_id"},
		{"missing target", &csi.NodeUnpublishVolumeRequest{VolumeId: "v"}, "target_path"},
		{"traversal target", &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: s.kubelet + "/pods/../../etc"}, "target_path"},
		{"target outside kubelet", &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/"}, "target_path"},
		{"symlink escaping kubelet", &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: s.kubelet + "/pods/escape/mount"}, "target_path"},
	}
	for _, tc := range unpublishes {
		t.Run("unpublish/"+tc.name, func(t *testing.T) {
			_, err := s.drv.Node.NodeUnpublishVolume(context.Background(), tc.req)
			expectInvalid(t, err, tc.field)
		})
	}
	// Non-UTF-8 strings cannot be produced by a protobuf client (kubelet included); a raw client
	// can send them, and gRPC refuses them before the handler runs.
	for _, field := range []string{"volume id", "secret value"} {
		t.Run("publish/non-UTF-8 "+field, func(t *testing.T) {
			req := rw(good, "victim")
			placeholder := "PLACEHOLDER-0123456789"
			if field == "volume id" {
				req.VolumeId = placeholder
			} else {
				req.VolumeContext["authenticationSource"] = "secret"
				req.Secrets = map[string]string{"access_key_id": "AKIA", "secret_access_key": placeholder}
			}
			wire, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			wire = bytes.Replace(wire, []byte(placeholder), []byte("\xff\xfe"+strings.Repeat("\xff", len(placeholder)-2)), 1)
			var resp rawMessage
			err = s.drv.Conn().Invoke(context.Background(), "/csi.v1.Node/NodePublishVolume", rawMessage(wire), &resp, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) == codes.OK || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("err = %v, want a refusal naming invalid UTF-8", err)
			}
		})
	}
	if n := len(publishes) + len(unpublishes) + 2; n < 25 {
		t.Fatalf("only %d hostile requests; the issue asks for at least 25", n)
	}
	if units := s.sd.Units("mount-s3-*"); len(units) != 0 {
		t.Errorf("units created by invalid requests: %v", units)
	}
	if after := snapshot(t, s.kubelet); !slices.Equal(before, after) {
		t.Errorf("invalid requests changed the kubelet directory:\nbefore %v\nafter  %v", before, after)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was created through the escaping symlink: %v", entries)
	}
	if strings.Contains(s.drv.Log(), "[profile other]") {
		t.Error("driver log contains the injected secret")
	}
}

func expectInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code = %v (%v), want InvalidArgument", st.Code(), err)
	}
	if !strings.HasPrefix(st.Message(), field+":") {
		t.Fatalf("message %q does not start with the field %q", st.Message(), field)
	}
}

// rawMessage and rawCodec send pre-encoded protobuf bytes, bypassing the client's validation.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(rawMessage), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*rawMessage)) = append(rawMessage(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// snapshot lists every path below dir (following no symlinks).
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}
