package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func TestPublishWriteReadUnpublish(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "data")
	fromS3 := randomBytes(t, 3<<20+17)
	s.s3.PutObject(t, "data", "dir/from-s3.bin", fromS3)

	target := s.target("pod-a")
	s.publish(rw(target, "data", "allow-delete"))

	got, err := os.ReadFile(filepath.Join(target, "dir", "from-s3.bin"))
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "object read through the mount", got, fromS3)

	written := randomBytes(t, 5<<20+3)
	if err := os.WriteFile(filepath.Join(target, "written.bin"), written, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "object written through the mount", s.s3.GetObject(t, "data", "written.bin"), written)

	entries, err := os.ReadDir(target)
	if err != nil || len(entries) != 2 {
		t.Fatalf("listing = %v, %v; want dir and written.bin", entries, err)
	}
	if err := os.Remove(filepath.Join(target, "written.bin")); err != nil {
		t.Fatalf("delete with allow-delete: %v", err)
	}
	if s.s3.ObjectExists(t, "data", "written.bin") {
		t.Error("object still in the bucket after delete")
	}

	s.unpublish(target)
	s.assertClean(target)
	s.unpublish(target) // idempotent
}

func TestReadOnly(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "read-only-bkt")
	s.s3.PutObject(t, "read-only-bkt", "a.txt", []byte("a"))
	for name, req := range map[string]*csi.NodePublishVolumeRequest{
		"reader-only mode": publishReq(s.target("pod-mode"), "read-only-bkt", csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY),
		"readonly flag": func() *csi.NodePublishVolumeRequest {
			r := rw(s.target("pod-flag"), "read-only-bkt")
			r.Readonly = true
			return r
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			s.publish(req)
			if b, err := os.ReadFile(filepath.Join(req.TargetPath, "a.txt")); err != nil || string(b) != "a" {
				t.Fatalf("read = %q, %v", b, err)
			}
			err := os.WriteFile(filepath.Join(req.TargetPath, "b.txt"), []byte("b"), 0o644)
			if !errors.Is(err, syscall.EROFS) {
				t.Fatalf("write on a read-only volume: %v, want EROFS", err)
			}
			if s.s3.ObjectExists(t, "read-only-bkt", "b.txt") {
				t.Fatal("object created through a read-only mount")
			}
			s.unpublish(req.TargetPath)
			s.assertClean(req.TargetPath)
		})
	}
}

func (s *suite) mainPID(target string) int {
	s.t.Helper()
	out, err := s.sd.Systemctl("show", "--property=MainPID", "--value", systemd.MountUnitName(target))
	if err != nil {
		s.t.Fatalf("systemctl show: %v %s", err, out)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	return pid
}

func TestRepublishRefreshesCredentials(t *testing.T) {
	s := newSuite(t, false)
	s.s3.CreateBucket(t, "rot")
	target := s.target("pod-a")
	req := rw(target, "rot")
	req.VolumeContext["authenticationSource"] = "secret"
	req.Secrets = map[string]string{"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey}
	s.publish(req)
	pid := s.mainPID(target)
	if pid == 0 {
		t.Fatal("mount unit has no main PID")
	}
	credFiles, _ := filepath.Glob(filepath.Join(s.drv.CredentialsDir(), "*", "credentials"))
	if len(credFiles) != 1 {
		t.Fatalf("credential files = %v, want one", credFiles)
	}
	// Nothing of them in the state directory, on the node's disk.
	if onDisk, _ := filepath.Glob(filepath.Join(s.stateDir(), "*", "credentials")); len(onDisk) != 0 {
		t.Errorf("credential files in the state directory: %v", onDisk)
	}
	before, _ := os.ReadFile(credFiles[0])

	req.Secrets = map[string]string{"access_key_id": "ROTATEDKEY", "secret_access_key": "rotatedsecret", "session_token": "rotatedtoken"}
	s.publish(req)
	after, _ := os.ReadFile(credFiles[0])
	if string(after) == string(before) || !strings.Contains(string(after), "ROTATEDKEY") || !strings.Contains(string(after), "rotatedtoken") {
		t.Fatalf("credentials not refreshed:\n%s", after)
	}
	// Readable by mount-s3's user through its group only, after the refresh as before.
	_, gid := s.sd.UserIDs(t, harness.MountS3User)
	for _, p := range []string{credFiles[0], filepath.Dir(credFiles[0])} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o640)
		if p != credFiles[0] {
			want = 0o750
		}
		if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != want || sys.Uid != 0 || int(sys.Gid) != gid {
			t.Errorf("%s: mode %v, owner %d:%d; want %v, root and mount-s3's group %d", p, st.Mode().Perm(), sys.Uid, sys.Gid, want, gid)
		}
	}
	if got := s.mainPID(target); got != pid {
		t.Errorf("republish restarted mount-s3 (pid %d → %d); it must be a no-op", pid, got)
	}
	if err := os.WriteFile(filepath.Join(target, "still-works"), []byte("x"), 0o644); err != nil {
		t.Errorf("mount unusable after republish: %v", err)
	}
	s.unpublish(target)
	s.assertClean(target)
	if left, _ := os.ReadDir(s.drv.CredentialsDir()); len(left) != 0 {
		t.Errorf("credentials directory not emptied by the unpublish: %v", left)
	}
}

func TestSystemdRestart(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "bkt-restart")
	first := s.target("pod-1")
	s.publish(rw(first, "bkt-restart"))
	s.sd.Restart() // the driver's D-Bus connection drops
	second := s.target("pod-2")
	s.publish(rw(second, "bkt-restart")) // reconnects transparently
	if err := os.WriteFile(filepath.Join(second, "after-restart"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := s.s3.GetObject(t, "bkt-restart", "after-restart"); string(b) != "ok" {
		t.Fatalf("object = %q", b)
	}
	// The first mount's mount-s3 outlived its manager: it is live, kubelet's republish keeps
	// it (no second mount stacked on it), and unpublish still removes it.
	if err := harness.StatfsWithin(first, time.Second); err != nil {
		t.Fatalf("the mount whose manager was killed: %v, want live", err)
	}
	s.publish(rw(first, "bkt-restart"))
	if n := len(harness.MountsBelow(first)); n != 2 {
		t.Errorf("after republish %s holds %d mounts, want 2 (the two binds of mount-s3's mount)", first, n)
	}
	// mount-s3's own mounts, one per target: made private before the binds, so the second bind
	// (mounted on the first) does not propagate back onto them.
	if n := len(harness.MountsBelow(filepath.Join(s.kubelet, "plugins", "s3.csi.scality.com-staging"))); n != 2 {
		t.Errorf("the staging directories hold %d mounts, want 2 (mount-s3's, one per target)", n)
	}
	s.unpublish(first)
	s.unpublish(second)
	s.assertClean(first)
	s.assertClean(second)
}

func TestDriverKilledDuringPublish(t *testing.T) {
	harness.RequireRoot(t)
	// mount-s3 that takes a while to start, so the kill lands in the middle of the publish.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // mount-s3's user runs it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	slow := filepath.Join(dir, "slow-mount-s3")
	script := "#!/bin/sh\nsleep 1\nexec " + harness.MountS3(t) + " \"$@\"\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSuite(t, true, "--mount-s3-path="+slow)
	s.s3.CreateBucket(t, "crash")
	target := s.target("pod-a")
	errCh := make(chan error, 1)
	go func() {
		_, err := s.drv.Node.NodePublishVolume(context.Background(), rw(target, "crash"))
		errCh <- err
	}()
	waitFor(t, 10*time.Second, "mount unit to start", func() bool {
		return len(s.sd.Units(strings.TrimSuffix(systemd.MountUnitName(target), ".service")+"*")) == 1
	})
	// A second publish of the same target while the first is in flight is refused.
	if _, err := s.drv.Node.NodePublishVolume(context.Background(), rw(target, "crash")); status.Code(err) != codes.Aborted {
		t.Errorf("concurrent publish on the same target: %v, want Aborted", err)
	}
	s.drv.Kill()
	if err := <-errCh; err == nil {
		t.Log("publish returned before the kill")
	}
	// The unit lives on and finishes the mount without the driver.
	waitFor(t, 15*time.Second, "orphaned mount to appear (its two binds)", func() bool { return len(harness.MountsBelow(target)) == 2 })
	s.drv.Restart()
	s.unpublish(target)
	s.assertClean(target)
}

// TestCorruptedMount: with the node plugin's own monitor off, a dead mount (mount-s3 killed)
// is unmounted by an unpublish, and repaired by a republish, which returns only once the new
// mount answers.
func TestCorruptedMount(t *testing.T) {
	s := newSuite(t, true, "--health-check-interval=0")
	s.s3.CreateBucket(t, "corrupt")
	for _, then := range []string{"unpublish", "republish"} {
		t.Run(then, func(t *testing.T) {
			target := s.target("pod-" + then)
			s.publish(rw(target, "corrupt"))
			pid := s.mainPID(target)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "mount to become corrupted", func() bool {
				_, err := os.Stat(target)
				return errors.Is(err, syscall.ENOTCONN)
			})
			if then == "republish" {
				s.publish(rw(target, "corrupt"))
				if err := os.WriteFile(filepath.Join(target, "healed"), []byte("y"), 0o644); err != nil {
					t.Fatalf("write after remount: %v", err)
				}
			}
			s.unpublish(target)
			s.assertClean(target)
		})
	}
}

func TestMountFailureCarriesMountS3Output(t *testing.T) {
	s := newSuite(t, true)
	target := s.target("pod-a")
	_, err := s.drv.Node.NodePublishVolume(context.Background(), rw(target, "missing-bucket"))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "missing-bucket") || !strings.Contains(err.Error(), "ListObjectsV2") {
		t.Fatalf("err = %v; want Internal quoting mount-s3's own error", err)
	}
	s.assertClean(target)

	// Wrong per-volume credentials: mount-s3's authentication error reaches the caller.
	s.s3.CreateBucket(t, "auth")
	req := rw(target, "auth")
	req.VolumeContext["authenticationSource"] = "secret"
	req.Secrets = map[string]string{"access_key_id": "WRONGKEY", "secret_access_key": "wrongsecret"}
	_, err = s.drv.Node.NodePublishVolume(context.Background(), req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "ListObjectsV2") {
		t.Fatalf("err = %v; want mount-s3's authentication failure", err)
	}
	if strings.Contains(err.Error(), "wrongsecret") {
		t.Fatal("error leaks the secret")
	}
	s.assertClean(target)
}

func TestFSGroup(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "shared")
	target := s.target("pod-a")
	req := rw(target, "shared")
	req.VolumeCapability.GetMount().VolumeMountGroup = "1234"
	s.publish(req)
	asUser := func(gid uint32, script string) error {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 2000, Gid: gid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := asUser(1234, "echo member > "+target+"/by-member && cat "+target+"/by-member"); err != nil {
		t.Fatalf("fsGroup member cannot write: %v", err)
	}
	if b := s.s3.GetObject(t, "shared", "by-member"); string(b) != "member\n" {
		t.Fatalf("object = %q", b)
	}
	if err := asUser(999, "ls "+target); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("non-member listed the volume: %v", err)
	}
	st, err := os.Stat(filepath.Join(target, "by-member"))
	if err != nil || st.Sys().(*syscall.Stat_t).Gid != 1234 || st.Mode().Perm() != 0o660 {
		t.Fatalf("file gid/mode = %v %v, want 1234 and 0660", st.Sys(), st.Mode())
	}
	s.unpublish(target)
	s.assertClean(target)
}

func TestNoSecretsInUnitsProcessesOrLogs(t *testing.T) {
	// The service manager's own environment carries AWS variables a unit would inherit; the
	// driver must keep every one of them away from mount-s3.
	s := newSuiteWith(t, true, []string{"AWS_CA_BUNDLE=/nonexistent/ca.pem", "AWS_SECRET_ACCESS_KEY=ManagerLeak", "AWS_PROFILE=manager-profile"})
	s.s3.CreateBucket(t, "secretive")
	target := s.target("pod-a")
	req := rw(target, "secretive")
	req.VolumeContext["authenticationSource"] = "secret"
	req.Secrets = map[string]string{"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey}
	s.publish(req)
	unit := systemd.MountUnitName(target)
	show, err := s.sd.Systemctl("show", unit)
	if err != nil {
		t.Fatalf("systemctl show: %v", err)
	}
	if !strings.Contains(show, "AWS_SHARED_CREDENTIALS_FILE=") {
		t.Fatalf("unit does not reference the profile files:\n%s", show)
	}
	pid := s.mainPID(target)
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	environ, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if len(cmdline) == 0 || len(environ) == 0 {
		t.Fatalf("cannot read mount-s3's cmdline/environ (pid %d)", pid)
	}
	for _, leaked := range []string{"AWS_CA_BUNDLE", "ManagerLeak", "manager-profile"} {
		if strings.Contains(string(environ), leaked) {
			t.Errorf("mount-s3 inherited %s from the service manager: %q", leaked, environ)
		}
	}
	if !strings.Contains(string(environ), "AWS_PROFILE=s3-csi") {
		t.Errorf("mount-s3 environment lacks the driver's profile: %q", environ)
	}
	s.unpublish(target)
	// Errors returned over gRPC: secrets where they do not belong, a wrong secret that S3
	// refuses (mount-s3's output is quoted in the error), a secret pasted as a key name.
	wrong := "WrongSecretKeyValue0123456789"
	var grpcErrors strings.Builder
	for _, secrets := range []map[string]string{
		{"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey + "\""},
		{"access_key_id": s.s3.AccessKey + " " + s.s3.SecretKey, "secret_access_key": s.s3.SecretKey},
		{"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey, s.s3.SecretKey: "x"},
		{"access_key_id": s.s3.AccessKey, "secret_access_key": wrong},
		{"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey, "session_token": s.s3.SecretKey + "\n"},
	} {
		bad := rw(s.target("pod-bad"), "secretive")
		bad.VolumeContext["authenticationSource"] = "secret"
		bad.Secrets = secrets
		_, err := s.drv.Node.NodePublishVolume(context.Background(), bad)
		if err == nil {
			t.Fatalf("publish with bad secrets succeeded")
		}
		grpcErrors.WriteString(err.Error() + "\n")
	}
	if !strings.Contains(grpcErrors.String(), "secrets:") {
		t.Fatalf("no secrets error among %s; the check below proves nothing", grpcErrors.String())
	}
	for what, text := range map[string]string{"unit properties": show, "mount-s3 argv": string(cmdline), "mount-s3 environment": string(environ), "driver log": s.drv.Log(), "gRPC errors": grpcErrors.String()} {
		for _, secret := range []string{s.s3.SecretKey, wrong} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contain a secret", what)
			}
		}
	}
	if !strings.Contains(s.drv.Log(), "NodePublishVolume") {
		t.Error("driver log has no request logs; the secret check above proves nothing")
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCacheDirectoryOwnedByDriver: the mount option `cache` (no path) gives mount-s3 a cache
// directory of its own, in --systemd-cache-dir and owned by mount-s3's user (who writes its
// cache there), which the unpublish removes; a PV that names a host path for it is refused
// before anything is created.
func TestCacheDirectoryOwnedByDriver(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "cached")
	target := s.target("pod-cache")
	s.publish(rw(target, "cached", "cache", "max-cache-size=64"))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.mainPID(target)))
	if err != nil {
		t.Fatal(err)
	}
	var cache string
	for _, a := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(a, "--cache="); ok {
			cache = v
		}
	}
	if filepath.Dir(cache) != s.drv.CacheDir() {
		t.Fatalf("mount-s3 runs with --cache=%q, want a directory in %s", cache, s.drv.CacheDir())
	}
	uid, gid := s.sd.UserIDs(t, harness.MountS3User)
	for _, p := range []string{cache, filepath.Join(cache, "mountpoint-cache")} { // the second made by mount-s3
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Fatalf("cache directory %s: %v %v, want a 0700 directory", p, st, err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, want mount-s3's user %d:%d", p, sys.Uid, sys.Gid, uid, gid)
		}
	}
	s.unpublish(target)
	s.assertClean(target)

	hostile := s.target("pod-hostile")
	_, err = s.drv.Node.NodePublishVolume(context.Background(), rw(hostile, "cached", "--cache=/etc"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cache") {
		t.Fatalf("publish with --cache=/etc: %v, want InvalidArgument naming the option", err)
	}
	s.assertClean(hostile)
}

// TestUmountFailureIsReported: an umount that fails makes the unpublish fail (Internal, with
// umount's output) and leaves the volume as it was (mounted, live, recorded); the next
// unpublish, once umount works, leaves nothing. Each unpublish of the live mount runs umount
// once, unforced, for the target's two binds and the staging mount.
func TestUmountFailureIsReported(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "fail")
	calls := filepath.Join(t.TempDir(), "calls")
	umount := filepath.Join(t.TempDir(), "umount")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\nif [ -e " + flag + " ]; then echo 'umount: target is busy (simulated)' >&2; exit 32; fi\nexec /bin/umount \"$@\"\n"
	if err := os.WriteFile(umount, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSuite(t, true, "--umount-path="+umount, "--health-check-interval=0")
	s.s3.CreateBucket(t, "busy")
	target := s.target("pod-busy")
	s.publish(rw(target, "busy"))
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.drv.Node.NodeUnpublishVolume(context.Background(), rwUnpublish(target))
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "target is busy (simulated)") {
		t.Fatalf("unpublish with a failing umount: %v, want Internal quoting umount's output", err)
	}
	if err := harness.StatfsWithin(target, time.Second); err != nil || !mountS3At(target) {
		t.Fatalf("after the failed unpublish the mount is not live (%v): the state must stay as it was", err)
	}
	if err := os.WriteFile(filepath.Join(target, "still-there"), []byte("x"), 0o644); err != nil {
		t.Errorf("the volume stopped working after a failed unpublish: %v", err)
	}
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	s.unpublish(target)
	s.assertClean(target)
	if keys := s.s3.ListKeys(t, "busy"); !slices.Contains(keys, "still-there") {
		t.Errorf("bucket holds %v, want still-there", keys)
	}
	out, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("umount ran %d times for two unpublishes, want one each: %q", len(lines), lines)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "--" || f[1] != target || f[2] != target || !strings.Contains(f[3], "-staging/") {
			t.Errorf("umount %q, want \"-- %s %s <staging>\": one unforced command for both binds and the staging mount", l, target, target)
		}
	}
}

// TestBusyTargetKeepsServing: with real umount(8), a target a process still uses (an open
// directory) cannot be unmounted: the unpublish fails (Internal, quoting umount), the target
// keeps serving the bucket, reads and writes included, even though the unmount unit's one
// umount command went on to the staging mount; once the target is released, the next
// unpublish leaves nothing, and every byte written is in the bucket.
func TestBusyTargetKeepsServing(t *testing.T) {
	s := newSuite(t, true, "--health-check-interval=0")
	s.s3.CreateBucket(t, "held")
	target := s.target("pod-held")
	s.publish(rw(target, "held"))
	if err := os.WriteFile(filepath.Join(target, "before"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(target) // an open directory on the mount: it is busy
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = s.drv.Node.NodeUnpublishVolume(context.Background(), rwUnpublish(target))
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "busy") {
		t.Fatalf("unpublish of a busy target: %v, want Internal quoting umount's \"target is busy\"", err)
	}
	if err := harness.StatfsWithin(target, time.Second); err != nil || !mountS3At(target) {
		t.Fatalf("after the failed unpublish the target is not a live mount-s3 mount (%v)", err)
	}
	if names, err := held.Readdirnames(-1); err != nil || !slices.Contains(names, "before") {
		t.Fatalf("listing through the held directory: %v %v, want before", names, err)
	}
	if err := os.WriteFile(filepath.Join(target, "after"), []byte("after"), 0o644); err != nil {
		t.Fatalf("writing after the failed unpublish: %v", err)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	s.unpublish(target)
	s.assertClean(target)
	keys := s.s3.ListKeys(t, "held")
	if !slices.Contains(keys, "before") || !slices.Contains(keys, "after") {
		t.Errorf("bucket holds %v, want before and after", keys)
	}
}
