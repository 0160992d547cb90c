// Package systemdmounter tests the systemd-mode Mounter (mounter/systemd) as a library against
// real parts: a systemd user manager, versitygw, FUSE and the mount-s3 stand-in.
package systemdmounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// env is one real setup: versitygw, a systemd user manager whose shared area is the fake
// kubelet dir, the mount-s3 stand-in, and a Mounter talking to that manager.
type env struct {
	s3      *harness.S3Server
	sd      *harness.Systemd
	kubelet string
	m       *systemd.Mounter
	state   string
	cache   string // CacheDir: the caches of mount-s3 run as harness.MountS3User
	creds   *credentials.Credentials
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, 0)
}

// setupWith is setup with a bound on mount-s3's cache (systemd.Config.MaxCacheMiB).
func setupWith(t *testing.T, maxCacheMiB uint64) *env {
	t.Helper()
	harness.RequireRoot(t)
	e := &env{s3: harness.StartS3(t)}
	e.kubelet = filepath.Join(t.TempDir(), "kubelet")
	e.sd = harness.StartSystemd(t, e.kubelet)
	e.state = filepath.Join(e.kubelet, "plugins", "s3.csi.scality.com", "systemd")
	// mount-s3 runs as its own user, as the chart has it: its credentials and cache live where
	// that user can reach them (directories under /tmp, as /run and /var/cache are).
	e.cache = traversableTempDir(t, "cache-")
	m, err := systemd.New(systemd.Config{
		MountS3User:    harness.MountS3User,
		CredentialsDir: traversableTempDir(t, "credentials-"),
		CacheDir:       e.cache,
		SystemdSocket:  e.sd.Socket,
		MountS3Path:    harness.MountS3(t),
		FuseHelperPath: harness.Bin(t, "scality-fuse-helper"),
		UmountPath:     "/bin/umount",
		StateDir:       e.state,
		StagingDir:     e.state + "-staging",
		StartTimeout:   20 * time.Second,
		MaxCacheMiB:    maxCacheMiB,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	e.m = m
	e.creds = &credentials.Credentials{AccessKeyID: e.s3.AccessKey, SecretAccessKey: e.s3.SecretKey}
	return e
}

// traversableTempDir is a new directory under the system's temporary directory, removed at
// the end of the test.
func traversableTempDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (e *env) request(t *testing.T, pod, bucket string, flags ...string) mounter.Request {
	t.Helper()
	built, err := mountargs.Build(mountargs.Options{MountFlags: flags, UserAgentPrefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(e.kubelet, "pods", pod, "volumes", "kubernetes.io~csi", "pv", "mount")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", target).Run() })
	return mounter.Request{
		VolumeID: "vol-" + bucket, Bucket: bucket, Target: target, Args: built.Args,
		Env:         []string{"AWS_REGION=" + e.s3.Region, "AWS_ENDPOINT_URL=" + e.s3.Endpoint},
		Credentials: e.creds,
	}
}

func TestMountWriteUnmount(t *testing.T) {
	e := setup(t)
	e.s3.CreateBucket(t, "bucket-a")
	e.s3.PutObject(t, "bucket-a", "hello.txt", []byte("hello from s3"))
	req := e.request(t, "pod1", "bucket-a", "allow-delete")
	ctx := context.Background()
	if err := e.m.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	r, err := (&mounthealth.Checker{}).Check(ctx, req.Target)
	if err != nil || r.State != mounthealth.Live || !mounttable.IsMountS3(r.Entry) {
		t.Fatalf("after Mount: %+v %v, want a live mount-s3 mount", r, err)
	}
	got, err := os.ReadFile(filepath.Join(req.Target, "hello.txt"))
	if err != nil || string(got) != "hello from s3" {
		t.Fatalf("read through mount: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(req.Target, "new.txt"), []byte("written via fuse"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := e.s3.GetObject(t, "bucket-a", "new.txt"); string(b) != "written via fuse" {
		t.Fatalf("object = %q", b)
	}
	// Republish is a no-op that refreshes credentials.
	if err := e.m.Mount(ctx, req); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if units := e.sd.Units("mount-s3-*"); len(units) != 1 {
		t.Fatalf("units = %v, want exactly the mount unit", units)
	}
	if err := e.m.Unmount(ctx, req.Target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(req.Target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target still there: %v", err)
	}
	if units := e.sd.Units("mount-s3-*"); len(units) != 0 {
		t.Errorf("units left: %v", units)
	}
	if entries, _ := os.ReadDir(e.state); len(entries) != 0 {
		t.Errorf("state left: %v", entries)
	}
	if err := e.m.Unmount(ctx, req.Target); err != nil {
		t.Errorf("second unmount: %v", err)
	}
}

func TestMountFailureReportsOutputAndCleansUp(t *testing.T) {
	e := setup(t)
	req := e.request(t, "pod1", "no-such-bucket")
	err := e.m.Mount(context.Background(), req)
	if !errors.Is(err, mounter.ErrMountFailed) || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), "ListObjectsV2") {
		t.Fatalf("err = %v, want ErrMountFailed with mount-s3's output", err)
	}
	if _, err := os.Stat(req.Target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target left behind: %v", err)
	}
	if units := e.sd.Units("mount-s3-*"); len(units) != 0 {
		t.Errorf("units left: %v", units)
	}
	if entries, _ := os.ReadDir(e.state); len(entries) != 0 {
		t.Errorf("state left: %v", entries)
	}
}

// TestUnitResources: a mount's requests and limits become its unit's cgroup settings in the
// driver's slice (memory request → MemoryLow, limit → MemoryMax, CPU request → CPUWeight as
// kubelet weighs a request, limit → CPUQuota), read back from the real manager; a repair after
// mount-s3 died starts the unit with the same settings (they are in the record); the node-wide
// cap lands on s3csi.slice. The manager here is a user manager on cgroup v1, which stores the
// settings but cannot enforce memory limits: the kernel's side is shown in pod mode.
func TestUnitResources(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.s3.CreateBucket(t, "sized")
	req := e.request(t, "pod1", "sized")
	req.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	if err := e.m.ConfigureSlice(ctx, systemd.SliceCap{Memory: resource.MustParse("2Gi"), CPU: resource.MustParse("2")}); err != nil {
		t.Fatalf("ConfigureSlice: %v", err)
	}
	if err := e.m.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	unit := systemd.MountUnitName(req.Target)
	want := map[string]string{
		"Slice":              systemd.Slice,
		"MemoryLow":          "134217728",
		"MemoryMax":          "536870912",
		"CPUWeight":          "10", // 250m: 256 shares, weight 1 + 254*9999/262142
		"CPUQuotaPerSecUSec": "1.500000s",
	}
	check := func(what string) {
		t.Helper()
		for prop, v := range want {
			out, err := e.sd.Systemctl("show", unit, "-p", prop, "--value")
			if err != nil || strings.TrimSpace(out) != v {
				t.Errorf("%s: %s %s = %q (%v), want %s", what, unit, prop, strings.TrimSpace(out), err, v)
			}
		}
	}
	check("after the mount")
	for prop, v := range map[string]string{"MemoryMax": "2147483648", "CPUQuotaPerSecUSec": "2s"} {
		if out, err := e.sd.Systemctl("show", systemd.Slice, "-p", prop, "--value"); err != nil || strings.TrimSpace(out) != v {
			t.Errorf("%s %s = %q (%v), want %s", systemd.Slice, prop, strings.TrimSpace(out), err, v)
		}
	}
	// Setting the cap again (a node plugin restart) updates the slice in place.
	if err := e.m.ConfigureSlice(ctx, systemd.SliceCap{Memory: resource.MustParse("3Gi")}); err != nil {
		t.Fatalf("ConfigureSlice again: %v", err)
	}
	if out, _ := e.sd.Systemctl("show", systemd.Slice, "-p", "MemoryMax", "--value"); strings.TrimSpace(out) != "3221225472" {
		t.Errorf("%s MemoryMax after the second cap = %q, want 3221225472", systemd.Slice, strings.TrimSpace(out))
	}

	// mount-s3 dies; the repair starts the unit again with the same settings.
	if _, err := e.sd.Systemctl("kill", "--signal=KILL", unit); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		if r, _ := (&mounthealth.Checker{}).Check(ctx, req.Target); r.State == mounthealth.Live {
			return "the mount still answers"
		}
		return ""
	})
	// The unit stays loaded, failed, with how it ended (systemd's Result): killed.
	harness.Eventually(t, 10*time.Second, func() string {
		out, _ := e.sd.Systemctl("show", unit, "-p", "ActiveState", "-p", "Result")
		if !strings.Contains(out, "ActiveState=failed") || !strings.Contains(out, "Result=signal") {
			return fmt.Sprintf("unit %s: %q, want failed with Result=signal", unit, out)
		}
		return ""
	})
	if repaired, err := e.m.Repair(ctx, req.Target); err != nil || !repaired {
		t.Fatalf("Repair = %v %v", repaired, err)
	}
	check("after the repair")
	if end := e.m.HowItEnded(ctx, req.Target, time.Now()); end.OOMKilled {
		t.Errorf("a killed unit reported OOM-killed: %+v", end)
	}
	if _, err := os.Stat(filepath.Join(e.unitStateDir(t), "mount-s3.result")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unit wrote a result file (no process may run in it at its stop): %v", err)
	}
	// What an OOM kill of a unit started by an earlier release leaves (its ExecStopPost wrote
	// the result to a file; this user manager on cgroup v1 cannot produce an OOM kill): the
	// Event's detail names the unit's MemoryMax.
	harness.Must(t, os.WriteFile(filepath.Join(e.unitStateDir(t), "mount-s3.result"), []byte("oom-kill\n"), 0o600))
	if end := e.m.HowItEnded(ctx, req.Target, time.Now()); !end.OOMKilled || !strings.Contains(end.Detail, "was OOM-killed at its MemoryMax=512Mi") {
		t.Errorf("after an OOM kill: %+v", end)
	}
	if err := e.m.Unmount(ctx, req.Target); err != nil {
		t.Fatal(err)
	}
}

// unitStateDir is the state directory of the only mount of the test.
func (e *env) unitStateDir(t *testing.T) string {
	t.Helper()
	entries, err := os.ReadDir(e.state)
	if err != nil || len(entries) != 1 {
		t.Fatalf("state directories %v (%v), want one", entries, err)
	}
	return filepath.Join(e.state, entries[0].Name())
}

// TestCacheBoundAndKeptOnRepair: a mount with a cache gets mount-s3's --max-cache-size from
// the node's bound (lowered when it asks for more), its cache directory is its user's own in
// CacheDir, and a repair after mount-s3 died starts it as the same user and keeps what the
// directory holds; the unpublish removes it.
func TestCacheBoundAndKeptOnRepair(t *testing.T) {
	e := setupWith(t, 900)
	ctx := context.Background()
	e.s3.CreateBucket(t, "cached")
	req := e.request(t, "pod1", "cached", "cache", "max-cache-size=5000")
	if err := e.m.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	unit := systemd.MountUnitName(req.Target)
	out, err := e.sd.Systemctl("show", unit, "-p", "ExecStart", "--value")
	if err != nil || !strings.Contains(out, "--max-cache-size=900") || strings.Contains(out, "--max-cache-size=5000") {
		t.Errorf("ExecStart %q (%v), want --max-cache-size lowered to 900", out, err)
	}
	cache := filepath.Join(e.cache, filepath.Base(e.unitStateDir(t)))
	if !strings.Contains(out, "--cache="+cache) {
		t.Errorf("ExecStart %q, want the cache in %s", out, cache)
	}
	uid, _ := e.sd.UserIDs(t, harness.MountS3User)
	runsAsUser := func(when string) {
		t.Helper()
		pid, err := e.sd.Systemctl("show", unit, "-p", "MainPID", "--value")
		if err != nil {
			t.Fatal(err)
		}
		status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(pid), "status"))
		if want := fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d\n", uid); err != nil || !strings.Contains(string(status), want) {
			t.Errorf("%s, mount-s3 (pid %s) does not run as its user %d: %v\n%s", when, pid, uid, err, status)
		}
	}
	runsAsUser("at the start")
	harness.Must(t, os.WriteFile(filepath.Join(cache, "marker"), []byte("kept"), 0o600))
	if _, err := e.sd.Systemctl("kill", "--signal=KILL", unit); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		if r, _ := (&mounthealth.Checker{}).Check(ctx, req.Target); r.State == mounthealth.Live {
			return "the mount still answers"
		}
		return ""
	})
	if repaired, err := e.m.Repair(ctx, req.Target); err != nil || !repaired {
		t.Fatalf("Repair = %v %v", repaired, err)
	}
	if b, err := os.ReadFile(filepath.Join(cache, "marker")); err != nil || string(b) != "kept" {
		t.Errorf("the repair lost the cache: %q %v", b, err)
	}
	runsAsUser("after the repair")
	// Dead again, and this time kubelet's republish finds it first: the same, from the record.
	if _, err := e.sd.Systemctl("kill", "--signal=KILL", unit); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		if r, _ := (&mounthealth.Checker{}).Check(ctx, req.Target); r.State == mounthealth.Live {
			return "the mount still answers"
		}
		return ""
	})
	if err := e.m.Mount(ctx, req); err != nil {
		t.Fatalf("republish of the dead mount: %v", err)
	}
	if out, _ := e.sd.Systemctl("show", unit, "-p", "ExecStart", "--value"); !strings.Contains(out, "--cache="+cache) {
		t.Errorf("ExecStart after the republish %q, want the cache %s", out, cache)
	}
	runsAsUser("after the republish")
	if err := e.m.Unmount(ctx, req.Target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache left after the unpublish: %v", err)
	}
}
