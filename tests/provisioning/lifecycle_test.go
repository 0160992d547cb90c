package provisioning

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestLifecycleWithMount provisions a volume per deletion policy, checks the bucket, mounts it
// through the node plugin (systemd mode) exactly as kubelet would publish the provisioned PV,
// writes a file, finds it in the bucket, unpublishes and deletes the volume.
func TestLifecycleWithMount(t *testing.T) {
	harness.RequireRoot(t)
	e := newEnv(t, harness.S3Options{})
	kubelet := harness.NewKubeletDir(t)
	sd := harness.StartSystemd(t, kubelet)
	harness.CleanupMounts(t, kubelet)
	node := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: e.s3, WithCredentials: true})

	tests := []struct {
		policy string
		// withSecret provisions with a provisioner secret (and publishes with the same Secret
		// as node-publish secret); otherwise the driver-level credentials are used.
		withSecret bool
		wantSource string
	}{
		{policy: "delete", wantSource: "driver"},
		{policy: "deleteWithObjects", withSecret: true, wantSource: "secret"},
		{policy: "retain", wantSource: "driver"},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			e.t = t
			var sec map[string]string
			if tc.withSecret {
				sec = e.rootSecrets()
			}
			name := "pvc-lifecycle-" + strings.ToLower(tc.policy)
			vol := e.mustCreate(createReq(name, map[string]string{"bucketDeletionPolicy": tc.policy, "bucketNamePrefix": "life-"}, sec))
			bucket := vol.GetVolumeContext()["bucketName"]
			if d := cmp.Diff(map[string]string{"bucketName": "life-" + name, "authenticationSource": tc.wantSource}, vol.GetVolumeContext()); d != "" {
				t.Fatalf("volume context (-want +got):\n%s", d)
			}
			if want := "v1:" + tc.policy + ":" + bucket; vol.GetVolumeId() != want {
				t.Fatalf("volume id %q, want %q", vol.GetVolumeId(), want)
			}
			if !e.s3.BucketExists(t, bucket) {
				t.Fatalf("bucket %s does not exist after CreateVolume", bucket)
			}
			if d := cmp.Diff(map[string]string{"s3.csi.scality.com/volume-name": name, "s3.csi.scality.com/volume-id": vol.GetVolumeId()}, e.s3.BucketTags(t, bucket)); d != "" {
				t.Fatalf("bucket tags (-want +got):\n%s", d)
			}

			// Publish the PV the provisioner would create: volume handle = volume id,
			// volumeAttributes = volume context (plus the provisioner's identity key).
			target := harness.TargetPath(t, kubelet, "pod-"+tc.policy, name)
			attrs := map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-s3.csi.scality.com"}
			for k, v := range vol.GetVolumeContext() {
				attrs[k] = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			_, err := node.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
				VolumeId:         vol.GetVolumeId(),
				TargetPath:       target,
				VolumeCapability: rwx[0],
				VolumeContext:    attrs,
				Secrets:          sec,
			})
			if err != nil {
				t.Fatalf("NodePublishVolume: %v\n%s", err, node.Log())
			}
			body := []byte("written through the mount of a provisioned volume: " + tc.policy)
			if err := os.WriteFile(filepath.Join(target, "hello.txt"), body, 0o644); err != nil {
				t.Fatalf("write through the mount: %v", err)
			}
			if _, err := node.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: target}); err != nil {
				t.Fatalf("NodeUnpublishVolume: %v", err)
			}
			if got := e.s3.GetObject(t, bucket, "hello.txt"); !bytes.Equal(got, body) {
				t.Fatalf("object hello.txt = %q, want %q", got, body)
			}

			err = e.delete(vol.GetVolumeId(), sec)
			switch tc.policy {
			case "delete":
				expectCode(t, "DeleteVolume of a bucket with an object (policy delete)", err, codes.FailedPrecondition)
				if !e.s3.BucketExists(t, bucket) || !e.s3.ObjectExists(t, bucket, "hello.txt") {
					t.Fatal("the bucket or its object is gone after a refused DeleteVolume")
				}
				// Once the user empties it, the provisioner's retry succeeds.
				e.s3.DeleteObject(t, bucket, "hello.txt")
				e.mustDelete(vol.GetVolumeId(), sec)
				if e.s3.BucketExists(t, bucket) {
					t.Fatal("bucket still exists after DeleteVolume succeeded")
				}
			case "deleteWithObjects":
				if err != nil {
					t.Fatalf("DeleteVolume (deleteWithObjects): %v", err)
				}
				if e.s3.BucketExists(t, bucket) {
					t.Fatal("bucket still exists after DeleteVolume succeeded")
				}
			case "retain":
				if err != nil {
					t.Fatalf("DeleteVolume (retain): %v", err)
				}
				if !e.s3.ObjectExists(t, bucket, "hello.txt") {
					t.Fatal("retained bucket lost its object")
				}
			}
			// Deleting again is success (the volume no longer exists or is retained).
			e.mustDelete(vol.GetVolumeId(), sec)
		})
	}
	e.t = t
	e.expectBuckets("life-pvc-lifecycle-retain")
}
