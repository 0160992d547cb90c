package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestCustomCABundle: an HTTPS endpoint with a private CA. Without --s3-ca-bundle, and with a
// bundle of another CA, mount-s3 refuses the certificate (its error reaches the caller); with
// the endpoint's CA the volume mounts and works. mount-s3 trusts the bundle alone
// (AWS_CA_BUNDLE, its --ca-bundle: it replaces the system trust store).
func TestCustomCABundle(t *testing.T) {
	harness.RequireRoot(t)
	s3 := harness.StartS3With(t, harness.S3Options{TLS: true})
	s3.CreateBucket(t, "tls-bucket")
	kubelet := harness.NewKubeletDir(t)
	sd := harness.StartSystemd(t, kubelet)
	harness.CleanupMounts(t, kubelet)

	without := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true})
	target := harness.TargetPath(t, kubelet, "pod-tls", "pv-tls")
	_, err := without.Node.NodePublishVolume(context.Background(), rw(target, "tls-bucket"))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "certificate") {
		t.Fatalf("publish without the CA bundle: %v, want mount-s3's certificate error", err)
	}
	without.Stop()

	wrong := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true,
		ExtraArgs: []string{"--s3-ca-bundle=" + harness.UnrelatedCA(t)}})
	_, err = wrong.Node.NodePublishVolume(context.Background(), rw(target, "tls-bucket"))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "certificate") {
		t.Fatalf("publish with another CA's bundle: %v, want mount-s3's certificate error", err)
	}
	wrong.Stop()

	with := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true,
		ExtraArgs: []string{"--s3-ca-bundle=" + s3.CABundle}})
	if _, err := with.Node.NodePublishVolume(context.Background(), rw(target, "tls-bucket")); err != nil {
		t.Fatalf("publish with the CA bundle: %v", err)
	}
	if err := os.WriteFile(filepath.Join(target, "over-tls"), []byte("tls"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s3.GetObject(t, "tls-bucket", "over-tls"); string(got) != "tls" {
		t.Fatalf("object = %q", got)
	}
	if _, err := with.Node.NodeUnpublishVolume(context.Background(), rwUnpublish(target)); err != nil {
		t.Fatal(err)
	}
}
