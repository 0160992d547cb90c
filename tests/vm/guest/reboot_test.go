package guest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// RebootDirEnv names the directory (on the guest's disk) where TestRebootBefore leaves what
// TestRebootAfter needs once the host rebooted the guest between them (tests/vm
// TestRebootWithLiveMount).
const RebootDirEnv = "S3CSI_VM_REBOOT_DIR"

// The chart's systemd-mode directories (charts/scality-s3-csi-driver node-daemonset.yaml):
// credentials on the node's /run (a tmpfs), mount-s3's cache on its disk.
const (
	chartCredentialsDir = "/run/s3.csi.scality.com"
	chartCacheDir       = "/var/cache/s3.csi.scality.com"
)

// rebootState is what the first half records for the second.
type rebootState struct {
	Kubelet  string // the kubelet directory (on disk)
	Target   string
	S3Addr   string // versitygw's loopback address, the endpoint the mount was made with
	S3Data   string // versitygw's data directory (on disk)
	Unit     string
	BootID   string
	Bucket   string
	VolumeID string
}

// keepTB is a *testing.T whose temporary directories are on the guest's disk below dir and
// survive the test, and whose cleanups never run: what TestRebootBefore starts stays as it is
// until the reboot ends it (its processes die with the test binary, PDEATHSIG; the mount-s3
// unit is PID 1's and serves on).
type keepTB struct {
	*testing.T
	dir string
}

func (k keepTB) TempDir() string {
	d, err := os.MkdirTemp(k.dir, "keep-")
	if err != nil {
		k.Fatalf("temporary directory below %s: %v", k.dir, err)
	}
	return d
}

func (keepTB) Cleanup(func()) {}

func rebootDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(RebootDirEnv)
	if dir == "" {
		t.Fatalf("%s is not set: this test is one half of tests/vm TestRebootWithLiveMount", RebootDirEnv)
	}
	return dir
}

func bootID(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(readFile(t, "/proc/sys/kernel/random/boot_id"))
}

func rebootNodeArgs() []string {
	return []string{"--mount-timeout=120s", "--systemd-credentials-dir=" + chartCredentialsDir, "--systemd-cache-dir=" + chartCacheDir}
}

// TestRebootBefore is the node before its reboot: the node plugin (with the chart's credential
// and cache directories) publishes a systemd-mode volume through PID 1, a file is written
// through it, and everything is left running for the host to reboot the guest.
func TestRebootBefore(t *testing.T) {
	dir := rebootDir(t)
	harness.Must(t, os.MkdirAll(dir, 0o755))
	keep := keepTB{T: t, dir: dir}
	const bucket = "vm-reboot"
	s3 := harness.StartS3(keep)
	s3.CreateBucket(t, bucket)
	kubelet := harness.NewKubeletDir(keep)
	drv := harness.StartDriver(keep, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: pid1Socket, S3: s3, WithCredentials: true, ExtraArgs: rebootNodeArgs()})
	target := harness.TargetPath(t, kubelet, "pod-reboot", "pv-reboot")
	req := publishRequest(target, bucket, "vol-vm-reboot")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v\n%s", err, drv.Log())
	}
	writeAndCheck(t, s3, bucket, target, "before-reboot")
	unit := systemd.MountUnitName(target)
	if s := (&pid1{t: t}).activeState(unit); s != "active" {
		t.Fatalf("%s is %q after the publish, want active", unit, s)
	}
	if entries, err := os.ReadDir(chartCredentialsDir); err != nil || len(entries) == 0 {
		t.Fatalf("no credential files of the mount in %s (%v): the reboot would show nothing", chartCredentialsDir, err)
	}
	st := rebootState{Kubelet: kubelet, Target: target, S3Addr: strings.TrimPrefix(s3.Endpoint, "http://"), S3Data: s3.DataDir,
		Unit: unit, BootID: bootID(t), Bucket: bucket, VolumeID: req.VolumeId}
	b, err := json.Marshal(st)
	harness.Must(t, err)
	harness.Must(t, os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600))
	t.Logf("left for the reboot: %s", b)
}

// TestRebootAfter is the node after a real reboot of the guest (a new boot ID): the mount and
// its unit are gone, and so are its credential files (the node's /run), while the kubelet
// directory and the mount's record are on disk. The node plugin starts again and reports the
// volume unhealthy rather than serving a dead target; kubelet's republish of the same target
// (kubelet does this for the pods it still runs) mounts it again through PID 1, the file
// written before the reboot reads back and a new one reaches the bucket; the unpublish then
// leaves nothing: no mount, no active unit, no record, no credential file.
func TestRebootAfter(t *testing.T) {
	dir := rebootDir(t)
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatalf("TestRebootBefore's state: %v", err)
	}
	var st rebootState
	harness.Must(t, json.Unmarshal(b, &st))
	t.Cleanup(func() {
		_ = os.RemoveAll(dir)
		if len(harness.MountsBelow(st.Kubelet)) == 0 { // as NewKubeletDir's cleanup, which the first half dropped
			for _, d := range []string{st.Kubelet, st.Kubelet + "-credentials", st.Kubelet + "-cache"} {
				_ = os.RemoveAll(d)
			}
		}
	})
	if id := bootID(t); id == st.BootID {
		t.Fatalf("boot ID %s is the one before the reboot: the guest did not reboot", id)
	}
	m := &pid1{t: t}
	if s := m.activeState(st.Unit); s != "inactive" && s != "" {
		t.Errorf("%s is %q after the reboot, want gone (a transient unit)", st.Unit, s)
	}
	if left := harness.MountsBelow(st.Kubelet); len(left) != 0 {
		t.Errorf("mounts below the kubelet directory after the reboot: %v", left)
	}
	if entries, err := os.ReadDir(chartCredentialsDir); err == nil && len(entries) != 0 {
		t.Errorf("credential files survived the reboot in %s: %v", chartCredentialsDir, entries)
	}
	record := filepath.Join(st.Kubelet, "plugins", "s3.csi.scality.com", "systemd")
	if entries, err := os.ReadDir(record); err != nil || len(entries) == 0 {
		t.Errorf("the mount's record in %s is gone after the reboot (%v): nothing says the target is systemd mode's", record, err)
	}

	s3 := harness.StartS3With(t, harness.S3Options{Addr: st.S3Addr, DataDir: st.S3Data})
	harness.CleanupMounts(t, st.Kubelet)
	drv := harness.StartDriver(t, harness.DriverOptions{KubeletDir: st.Kubelet, SystemdSocket: pid1Socket, S3: s3, WithCredentials: true, ExtraArgs: rebootNodeArgs()})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log:\n%s", drv.Log())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	health, err := drv.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: st.VolumeID, VolumePublishPath: st.Target})
	if err == nil && len(health.GetVolumeHealth().GetHealthStatuses()) == 0 {
		t.Errorf("NodeGetVolumeHealth of the dead target after the reboot reports it healthy, want an error or a health status")
	}
	t.Logf("NodeGetVolumeHealth after the reboot: %v %v", health.GetVolumeHealth(), err)

	start := time.Now()
	req := publishRequest(st.Target, st.Bucket, st.VolumeID)
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume of the same target after the reboot: %v", err)
	}
	t.Logf("republished after the reboot in %v", time.Since(start).Round(time.Millisecond))
	if got, err := os.ReadFile(filepath.Join(st.Target, "before-reboot")); err != nil || !strings.Contains(string(got), "before-reboot") {
		t.Errorf("the file written before the reboot: %q %v", got, err)
	}
	writeAndCheck(t, s3, st.Bucket, st.Target, "after-reboot")
	if s := m.activeState(st.Unit); s != "active" {
		t.Errorf("%s is %q after the republish, want active", st.Unit, s)
	}

	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: st.VolumeID, TargetPath: st.Target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if left := harness.MountsBelow(st.Kubelet); len(left) != 0 {
		t.Errorf("still mounted after unpublish: %v", left)
	}
	if s := m.activeState(st.Unit); s != "inactive" && s != "" {
		t.Errorf("%s is %q after unpublish", st.Unit, s)
	}
	if entries, err := os.ReadDir(record); err == nil && len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("records left in %s after unpublish: %v", record, names)
	}
	if entries, err := os.ReadDir(chartCredentialsDir); err == nil && len(entries) != 0 {
		t.Errorf("credential files left in %s after unpublish: %v", chartCredentialsDir, entries)
	}
}
