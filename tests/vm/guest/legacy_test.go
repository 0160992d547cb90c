package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestAdoptLegacyMountOnPID1 is the in-place upgrade from Scality's 1.x driver on a node's own
// systemd: a unit shaped as 1.x starts them (a transient mount-s3-<version>-<uuid>.service of
// PID 1, Type=forking, no CollectMode, mount-s3 mounting the kubelet target itself with the
// credentials as an AWS profile pair in the plugin directory; the shape tests/integration's
// legacyMount documents with its sources) serves a pod; kubelet's republish after the upgrade
// keeps that mount (no second mount on top) and the pod keeps writing; the unpublish unmounts
// it, stops and unloads its unit and removes its files.
func TestAdoptLegacyMountOnPID1(t *testing.T) {
	const bucket = "vm-legacy"
	s3, kubelet, drv := startNode(t, bucket, "--health-check-interval=0")
	m := &pid1{t: t}

	podUID := "0a1b2c3d-1111-2222-3333-444455556666"
	target := harness.TargetPath(t, kubelet, podUID, "pv-legacy")
	plugin := filepath.Join(kubelet, "plugins", "s3.csi.scality.com")
	harness.Must(t, os.MkdirAll(plugin, 0o750))
	profile := podUID + "-vol-legacy-s3-csi"
	cfg, creds := filepath.Join(plugin, profile+"-config"), filepath.Join(plugin, profile+"-credentials")
	harness.Must(t, os.WriteFile(cfg, []byte("[profile "+profile+"]\n"), 0o640))
	harness.Must(t, os.WriteFile(creds, []byte("["+profile+"]\naws_access_key_id="+s3.AccessKey+"\naws_secret_access_key="+s3.SecretKey+"\n"), 0o640))
	harness.Must(t, os.MkdirAll(target, 0o755))
	unit := "mount-s3-1.2.0-6f1c2c1e-3b7a-4f0e-9a41-" + podUID[len(podUID)-12:] + ".service"
	// The unit's properties as 1.2.0 sets them (scality/mountpoint-s3-csi-driver@1.2.0:
	// pkg/system/systemd.go ExecConfig.ToDbus, pkg/driver/node/mounter/systemd_mounter.go
	// Mount): Description, Type=forking, StandardOutput/StandardError=tty on a pty the 1.x
	// node plugin holds, ExecStart (UncleanIsFailure, systemd-run's default), Environment.
	// The upgrade replaces that plugin, which closes the pty's master side.
	ptmx, ptsN := openPty(t)
	args := []string{"--unit=" + unit, "-p", "Type=forking", "-p", "Description=Mountpoint for Amazon S3 CSI driver FUSE daemon",
		"-p", "StandardOutput=tty", "-p", "StandardError=tty", "-p", fmt.Sprintf("TTYPath=/dev/pts/%d", ptsN)}
	for _, e := range []string{"AWS_REGION=" + s3.Region, "AWS_ENDPOINT_URL=" + s3.Endpoint, "AWS_PROFILE=" + profile, "AWS_CONFIG_FILE=" + cfg, "AWS_SHARED_CREDENTIALS_FILE=" + creds} {
		args = append(args, "--setenv="+e)
	}
	args = append(args, harness.MountS3(t), "--allow-delete", "--force-path-style", bucket, target)
	if out, err := exec.Command("systemd-run", args...).CombinedOutput(); err != nil {
		t.Fatalf("systemd-run (the 1.x unit): %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", unit).Run()
		_ = exec.Command("systemctl", "reset-failed", unit).Run()
	})
	waitFor(t, 2*time.Minute, "the 1.x mount", func() bool {
		return len(harness.MountsBelow(target)) == 1 && harness.StatfsWithin(target, 2*time.Second) == nil
	})
	writeAndCheck(t, s3, bucket, target, "before-upgrade")
	pid := m.mainPID(unit)

	harness.Must(t, ptmx.Close()) // the 1.x node plugin is gone
	req := publishRequest(target, bucket, "vol-legacy")
	req.VolumeContext["csi.storage.k8s.io/pod.uid"] = podUID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("kubelet's republish after the upgrade: %v", err)
	}
	if n := len(harness.MountsBelow(target)); n != 1 {
		t.Errorf("after the republish %s holds %d mounts, want the 1.x mount alone", target, n)
	}
	if p := m.mainPID(unit); p != pid || m.activeState(unit) != "active" {
		t.Errorf("after the republish the 1.x unit is %s with mount-s3 %d, want active with %d", m.activeState(unit), p, pid)
	}
	writeAndCheck(t, s3, bucket, target, "after-upgrade")

	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if left := harness.MountsBelow(target); len(left) != 0 {
		t.Errorf("still mounted after unpublish: %v", left)
	}
	if st := m.activeState(unit); st != "inactive" {
		t.Errorf("the 1.x unit is %s after unpublish", st)
	}
	if prop, err := m.conn().GetUnitPropertyContext(ctx, unit, "LoadState"); err != nil || prop.Value.Value() != "not-found" {
		t.Errorf("the 1.x unit is still loaded after unpublish (LoadState %v, %v)", prop, err)
	}
	for _, f := range []string{cfg, creds} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("1.x credential file %s left: %v", f, err)
		}
	}
}

// openPty opens a pseudo-terminal's master side and returns it with the number of its
// /dev/pts slave, as the 1.x node plugin did for each mount's output.
func openPty(t *testing.T) (*os.File, int) {
	t.Helper()
	f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	harness.Must(t, err)
	t.Cleanup(func() { _ = f.Close() })
	harness.Must(t, unix.IoctlSetPointerInt(int(f.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPTN)
	harness.Must(t, err)
	return f, n
}
