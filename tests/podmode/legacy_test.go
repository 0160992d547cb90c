package podmode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestAdoptLegacyMountWithoutSystemd: a pod-only node plugin (--systemd-mounter=false, as the
// chart runs it when no node uses systemd mode) installed over the 1.x driver keeps a live 1.x
// mount on kubelet's republish (credential files rewritten, no Mountpoint Pod bind on top), and
// its unpublish unmounts it directly (its mount-s3 exits) and removes its credential files.
func TestAdoptLegacyMountWithoutSystemd(t *testing.T) {
	n := newNode(t, "--systemd-mounter=false")
	n.s3.CreateBucket(t, "legacy")
	pv := n.volume("legacy", "legacy", corev1.ReadWriteMany)
	w := n.workload("w", pv, nil)
	req := n.publishReq(w, pv, false)
	target := req.TargetPath

	// What 1.x left: mount-s3 (daemonised) on the target, its profile pair in the plugin dir.
	plugin := filepath.Join(n.kubelet, "plugins", "s3.csi.scality.com")
	harness.Must(t, os.MkdirAll(plugin, 0o750))
	profile := string(w.UID) + "-" + req.VolumeId + "-s3-csi"
	cfg, creds := filepath.Join(plugin, profile+"-config"), filepath.Join(plugin, profile+"-credentials")
	harness.Must(t, os.WriteFile(cfg, []byte("[profile "+profile+"]\n"), 0o640))
	harness.Must(t, os.WriteFile(creds, []byte("["+profile+"]\naws_access_key_id="+n.s3.AccessKey+"\naws_secret_access_key="+n.s3.SecretKey+"\n"), 0o640))
	harness.Must(t, os.MkdirAll(target, 0o755))
	cmd := exec.Command(harness.MountS3(t), "--allow-delete", "--force-path-style", "legacy", target)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "AWS_REGION=" + n.s3.Region, "AWS_ENDPOINT_URL=" + n.s3.Endpoint,
		"AWS_PROFILE=" + profile, "AWS_CONFIG_FILE=" + cfg, "AWS_SHARED_CREDENTIALS_FILE=" + creds}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("1.x mount-s3: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
	harness.Must(t, os.WriteFile(filepath.Join(target, "before-upgrade"), []byte("1.x"), 0o644))
	st, err := os.Stat(creds)
	harness.Must(t, err)
	inode := st.Sys().(*syscall.Stat_t).Ino

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("republish of a 1.x mount: %v", err)
	}
	if m := harness.MountsBelow(target); len(m) != 1 {
		t.Errorf("after republish %s holds %v, want the 1.x mount alone", target, m)
	}
	if st, err := os.Stat(creds); err != nil || st.Sys().(*syscall.Stat_t).Ino == inode {
		t.Errorf("1.x credential file not rewritten (%v)", err)
	}
	harness.Must(t, os.WriteFile(filepath.Join(target, "after-upgrade"), []byte("2.x"), 0o644))

	n.unpublish(target)
	if m := harness.MountsBelow(target); len(m) != 0 {
		t.Errorf("still mounted after unpublish: %v", m)
	}
	for _, f := range []string{cfg, creds} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("1.x credential file %s left: %v", f, err)
		}
	}
	for _, key := range []string{"before-upgrade", "after-upgrade"} {
		if !n.s3.ObjectExists(t, "legacy", key) {
			t.Errorf("object %s missing", key)
		}
	}
}
