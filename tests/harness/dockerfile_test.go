package harness

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDriverImageLayout(t *testing.T) {
	l, err := DriverImageLayout()
	if err != nil {
		t.Fatal(err)
	}
	want := ImageLayout{
		Binaries: map[string]string{"scality-s3-csi-driver": "/bin/scality-s3-csi-driver", "scality-csi-controller": "/bin/scality-csi-controller",
			"scality-csi-mounter": "/bin/scality-csi-mounter", "install-mp": "/bin/install-mp",
			"scality-fuse-helper": "/mountpoint-s3/bin/scality-fuse-helper"},
		MountS3:    "/mountpoint-s3/bin/mount-s3",
		Entrypoint: []string{"/bin/scality-s3-csi-driver"},
	}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
}
