package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// legacyMount makes what the Scality driver 1.x leaves on a node for a Running pod: a transient
// unit mount-s3-<version>-<uuid>.service (Type=forking) running mount-s3 directly on the kubelet
// target path, with the driver's credentials as an AWS profile pair in the plugin directory
// named <pod>-<volume>-s3-csi-{config,credentials} (anchors §3.1, §4.1-4.2). It returns the
// unit and the two files.
func (s *suite) legacyMount(t *testing.T, podUID, volumeID, bucket, target string) (unit string, files []string) {
	t.Helper()
	plugin := filepath.Join(s.kubelet, "plugins", "s3.csi.scality.com")
	harness.Must(t, os.MkdirAll(plugin, 0o750))
	profile := podUID + "-" + volumeID + "-s3-csi"
	cfg, creds := filepath.Join(plugin, profile+"-config"), filepath.Join(plugin, profile+"-credentials")
	harness.Must(t, os.WriteFile(cfg, []byte("[profile "+profile+"]\n"), 0o640))
	harness.Must(t, os.WriteFile(creds, []byte("["+profile+"]\naws_access_key_id="+s.s3.AccessKey+"\naws_secret_access_key="+s.s3.SecretKey+"\n"), 0o640))
	harness.Must(t, os.MkdirAll(target, 0o755))
	unit = "mount-s3-1.2.0-6f1c2c1e-3b7a-4f0e-9a41-" + podUID[len(podUID)-12:] + ".service"
	s.sd.RunUnit(unit, []string{"Type=forking", "Description=Mountpoint for Amazon S3 CSI driver FUSE daemon"},
		[]string{"AWS_REGION=" + s.s3.Region, "AWS_ENDPOINT_URL=" + s.s3.Endpoint, "AWS_PROFILE=" + profile, "AWS_CONFIG_FILE=" + cfg, "AWS_SHARED_CREDENTIALS_FILE=" + creds},
		harness.MountS3(t), "--allow-delete", "--force-path-style", bucket, target)
	waitFor(t, 10*time.Second, "the 1.x mount", func() bool { return mountS3At(target) })
	return unit, []string{cfg, creds}
}

// TestAdoptLegacyMount: after an in-place upgrade from the 1.x driver, kubelet's republish of
// a Running pod's 1.x volume keeps the mount (no second mount on top), rewrites its credential
// files, and the pod keeps reading and writing; the unpublish unmounts it, stops its unit and
// removes its files; the next pod at that path mounts the node's way.
func TestAdoptLegacyMount(t *testing.T) {
	addr := freeAddr(t)
	s := newSuite(t, true, "--health-check-interval=0", "--metrics-address="+addr)
	s.s3.CreateBucket(t, "legacy")
	podUID := "0a1b2c3d-1111-2222-3333-444455556666"
	target := harness.TargetPath(t, s.kubelet, podUID, "pv-legacy")
	unit, files := s.legacyMount(t, podUID, "vol-legacy", "legacy", target)
	harness.Must(t, os.WriteFile(filepath.Join(target, "before-upgrade"), []byte("1.x"), 0o644))
	if n := metric(t, addr, "s3csi_node_mounts", `mode="legacy"`); n != 1 {
		t.Errorf("s3csi_node_mounts{mode=\"legacy\"} = %v, want 1", n)
	}
	inodes := map[string]uint64{}
	for _, f := range files {
		st, err := os.Stat(f)
		harness.Must(t, err)
		inodes[f] = st.Sys().(*syscall.Stat_t).Ino
	}

	req := rw(target, "legacy")
	req.VolumeId = "vol-legacy"
	req.VolumeContext["csi.storage.k8s.io/pod.uid"] = podUID
	s.publish(req) // kubelet's republish after the upgrade
	if n := len(harness.MountsBelow(target)); n != 1 {
		t.Errorf("after republish %s holds %d mounts, want the 1.x mount alone", target, n)
	}
	if len(s.sd.Units(unit)) != 1 {
		t.Errorf("the 1.x unit %s is gone after a republish", unit)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatalf("1.x credential file: %v", err)
		}
		if st.Sys().(*syscall.Stat_t).Ino == inodes[f] {
			t.Errorf("%s was not rewritten by the republish", f)
		}
	}
	harness.Must(t, os.WriteFile(filepath.Join(target, "after-upgrade"), []byte("2.x"), 0o644))
	for _, key := range []string{"before-upgrade", "after-upgrade"} {
		if !s.s3.ObjectExists(t, "legacy", key) {
			t.Errorf("object %s missing from the bucket", key)
		}
	}

	// A 1.x node plugin that got kubelet's republish of this mounted target (a rollback
	// window) started a second unit, which failed and stays loaded: the unpublish removes it too.
	plugin := filepath.Join(s.kubelet, "plugins", "s3.csi.scality.com")
	failed := "mount-s3-1.2.0-6f1c2c1e-3b7a-4f0e-9a41-000000000fa1.service"
	if err := s.sd.RunUnitUncollected(failed, []string{"Type=forking", "Description=Mountpoint for Amazon S3 CSI driver FUSE daemon"},
		[]string{"AWS_REGION=" + s.s3.Region, "AWS_ENDPOINT_URL=" + s.s3.Endpoint, "AWS_PROFILE=x", "AWS_CONFIG_FILE=" + filepath.Join(plugin, "x-config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(plugin, "x-credentials")},
		harness.MountS3(t), "--allow-delete", "--force-path-style", "legacy", target); err == nil {
		t.Fatal("a second 1.x unit mounted an already mounted target")
	}
	if len(s.sd.Units(failed)) != 1 {
		t.Fatalf("the failed 1.x unit %s is not loaded", failed)
	}

	s.unpublish(target)
	if m := harness.MountsBelow(target); len(m) != 0 {
		t.Errorf("still mounted after unpublish: %v", m)
	}
	for _, u := range []string{unit, failed} {
		if left := s.sd.Units(u); len(left) != 0 {
			t.Errorf("1.x unit left: %v", left)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("1.x credential file %s left: %v", f, err)
		}
	}
	s.assertClean(target)
	if n := metric(t, addr, "s3csi_node_mounts", `mode="legacy"`); n != 0 {
		t.Errorf("s3csi_node_mounts{mode=\"legacy\"} = %v after the last 1.x mount left, want 0", n)
	}

	// The next pod at a target of that volume mounts in the node's mode.
	next := s.target("pod-next")
	s.publish(rw(next, "legacy"))
	if n := metric(t, addr, "s3csi_node_mounts", `mode="systemd"`); n != 1 {
		t.Errorf("s3csi_node_mounts{mode=\"systemd\"} = %v, want 1", n)
	}
	if !s.s3.ObjectExists(t, "legacy", "after-upgrade") {
		t.Error("data lost")
	}
	s.unpublish(next)
	s.assertClean(next)
}
