// Package integration runs the real node plugin process against real components: versitygw,
// a systemd user manager, FUSE mounts served by the mount-s3 stand-in.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// suite is one node: S3 server, systemd manager, kubelet dir and a driver process.
type suite struct {
	t       *testing.T
	s3      *harness.S3Server
	sd      *harness.Systemd
	kubelet string
	drv     *harness.Driver
}

func newSuite(t *testing.T, withCreds bool, extraArgs ...string) *suite {
	t.Helper()
	return newSuiteWith(t, withCreds, nil, extraArgs...)
}

// newSuiteWith also sets extra environment variables on the systemd manager.
func newSuiteWith(t *testing.T, withCreds bool, systemdEnv []string, extraArgs ...string) *suite {
	t.Helper()
	harness.RequireRoot(t)
	s := &suite{t: t, s3: harness.StartS3(t), kubelet: harness.NewKubeletDir(t)}
	s.sd = harness.StartSystemd(t, s.kubelet, systemdEnv...)
	harness.CleanupMounts(t, s.kubelet)
	s.drv = harness.StartDriver(t, harness.DriverOptions{
		KubeletDir: s.kubelet, SystemdSocket: s.sd.Socket, S3: s.s3, WithCredentials: withCreds, ExtraArgs: extraArgs,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s", tailLog(s.drv.Log()))
		}
	})
	return s
}

func (s *suite) stateDir() string {
	return filepath.Join(s.kubelet, "plugins", "s3.csi.scality.com", "systemd")
}

func (s *suite) target(pod string) string { return harness.TargetPath(s.t, s.kubelet, pod, "pv-"+pod) }

func publishReq(target, bucket string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "vol-" + bucket,
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		},
		VolumeContext: map[string]string{"bucketName": bucket},
	}
}

func rw(target, bucket string, flags ...string) *csi.NodePublishVolumeRequest {
	return publishReq(target, bucket, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, flags...)
}

func (s *suite) publish(req *csi.NodePublishVolumeRequest) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.drv.Node.NodePublishVolume(ctx, req); err != nil {
		s.t.Fatalf("NodePublishVolume(%s): %v\ndriver log:\n%s", req.TargetPath, err, tailLog(s.drv.Log()))
	}
}

func (s *suite) unpublish(target string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}); err != nil {
		s.t.Fatalf("NodeUnpublishVolume(%s): %v\ndriver log:\n%s", target, err, tailLog(s.drv.Log()))
	}
}

// assertClean checks that nothing of target is left: no mount, no unit, no state files, no
// target directory.
func (s *suite) assertClean(target string) {
	s.t.Helper()
	if m := harness.MountsBelow(target); len(m) != 0 {
		s.t.Errorf("still mounted: %v", m)
	}
	unit := systemd.MountUnitName(target)
	if units := s.sd.Units(strings.TrimSuffix(unit, ".service") + "*"); len(units) != 0 {
		s.t.Errorf("units left: %v", units)
	}
	if units := s.sd.Units("mount-s3-umount-*"); len(units) != 0 {
		s.t.Errorf("unmount units left: %v", units)
	}
	if entries, err := os.ReadDir(s.stateDir()); err == nil && len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		s.t.Errorf("state left in %s: %v", s.stateDir(), names)
	}
	for _, dir := range []string{s.drv.CredentialsDir(), s.drv.CacheDir()} {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) != 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			s.t.Errorf("left in %s: %v", dir, names)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		s.t.Errorf("target %s not removed: %v", target, err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func tailLog(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

func mustEqualBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes, want %d bytes (content differs)", what, len(got), len(want))
	}
}

func rwUnpublish(target string) *csi.NodeUnpublishVolumeRequest {
	return &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}
}
