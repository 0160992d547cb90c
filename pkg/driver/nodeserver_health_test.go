package driver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/mountertest"
)

// TestVolumeHealthWithoutPath: NodeGetVolumeHealth without volume_publish_path (optional in
// CSI) reports every target the volume is published at on the node; a target whose mount is
// gone is INACCESSIBLE, a volume published nowhere here is NotFound.
func TestVolumeHealthWithoutPath(t *testing.T) {
	kubelet := t.TempDir()
	gone := filepath.Join(kubelet, "pods", "p1", "volumes", "kubernetes.io~csi", "pv-1", "mount")
	ns, err := NewNodeServer(NodeConfig{NodeID: "n", KubeletPath: kubelet, S3Region: "r",
		Published: func() []mounter.Target {
			return []mounter.Target{{Path: gone, VolumeID: "vol-1"}, {Path: "/elsewhere", VolumeID: "vol-2"}}
		}}, &mountertest.Fake{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := ns.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-1"})
	if err != nil {
		t.Fatal(err)
	}
	h := resp.GetVolumeHealth()
	if h.GetVolumeId() != "vol-1" || len(h.GetHealthStatuses()) != 1 || h.GetHealthStatuses()[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE ||
		!strings.Contains(h.GetHealthStatuses()[0].GetMessage(), gone) {
		t.Errorf("health = %v, want one INACCESSIBLE entry naming %s", h, gone)
	}
	_, err = ns.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-9"})
	if c := codeOf(err); c != codes.NotFound || !strings.HasPrefix(err.Error(), "volume_id:") {
		t.Errorf("unknown volume: %v (%v), want NotFound naming volume_id", c, err)
	}
	for path, want := range map[string]codes.Code{"some/path": codes.NotFound, "/etc": codes.NotFound, "": codes.InvalidArgument, "a\u202eb": codes.InvalidArgument} {
		_, err := ns.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: path})
		if c := codeOf(err); c != want || !strings.HasPrefix(err.Error(), "volume_path:") {
			t.Errorf("stats at %q: %v (%v), want %v naming volume_path", path, c, err, want)
		}
	}
}
