package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
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

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// freeAddr returns a free loopback TCP address.
func freeAddr(t *testing.T) string { return harness.FreeLoopbackAddr(t) }

// metric returns the sum of a metric's samples whose labels contain every wanted pair. Every
// sample of the node plugin carries the node's name.
func metric(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	text, err := harness.Scrape("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	sum, _ := harness.MetricSum(text, name, labels...)
	if all, n := harness.MetricSum(text, name); n > 0 {
		if _, labelled := harness.MetricSum(text, name, `node="`+harness.DefaultNodeID+`"`); labelled != n {
			t.Errorf("%d of the %d samples of %s (sum %v) lack node=%q", n-labelled, n, name, all, harness.DefaultNodeID)
		}
	}
	return sum
}

// TestDeadMountRepairedWithoutKubelet: mount-s3 killed (-9) is noticed and its mount made live
// again by the node plugin itself, within seconds, with no call from kubelet; what was written
// before the crash is in the bucket and new writes land; metrics count it.
func TestDeadMountRepairedWithoutKubelet(t *testing.T) {
	addr := freeAddr(t)
	s := newSuite(t, true, "--metrics-address="+addr)
	s.s3.CreateBucket(t, "heal")
	target := s.target("pod-a")
	s.publish(rw(target, "heal"))
	before := randomBytes(t, 64<<10)
	if err := os.WriteFile(filepath.Join(target, "before"), before, 0o644); err != nil {
		t.Fatal(err)
	}
	pid := s.mainPID(target)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the mount to be live again with a new mount-s3", func() bool {
		p := s.mainPID(target)
		return p != 0 && p != pid && harness.StatfsWithin(target, time.Second) == nil
	})
	t.Logf("mount live again %v after mount-s3 was killed, without kubelet", time.Since(killed).Round(time.Millisecond))
	mustEqualBytes(t, "object written before the crash", s.s3.GetObject(t, "heal", "before"), before)
	if err := os.WriteFile(filepath.Join(target, "after"), []byte("after"), 0o644); err != nil {
		t.Fatalf("write after the repair: %v", err)
	}
	if got := s.s3.GetObject(t, "heal", "after"); string(got) != "after" {
		t.Errorf("object written after the repair = %q", got)
	}
	waitFor(t, 10*time.Second, "the repair to be counted", func() bool {
		return metric(t, addr, "s3csi_node_mount_dead_total", `mode="systemd"`) >= 1 &&
			metric(t, addr, "s3csi_node_mount_repairs_total", `mode="systemd"`, `result="succeeded"`) >= 1
	})
	if live := metric(t, addr, "s3csi_node_mount_health", `mode="systemd"`, `state="live"`); live != 1 {
		t.Errorf("s3csi_node_mount_health{state=live} = %v, want 1", live)
	}
	s.unpublish(target)
	s.assertClean(target)
}

// TestVolumeStatsAndHealth: NodeGetVolumeStats and NodeGetVolumeHealth tell a live mount from a
// dead one (mount-s3 killed, monitor off), never answering OK stats for a dead mount, and a
// path without a mount of the driver is NotFound.
func TestVolumeStatsAndHealth(t *testing.T) {
	s := newSuite(t, true, "--health-check-interval=0")
	s.s3.CreateBucket(t, "stats")
	target := s.target("pod-a")
	ctx := context.Background()
	stats := func() (*csi.NodeGetVolumeStatsResponse, error) {
		return s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-stats", VolumePath: target})
	}
	health := func() (*csi.NodeGetVolumeHealthResponse, error) {
		return s.drv.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-stats", VolumePublishPath: target})
	}
	if _, err := stats(); status.Code(err) != codes.NotFound {
		t.Errorf("stats before publish: %v, want NotFound", err)
	}
	s.publish(rw(target, "stats"))
	if r, err := stats(); err != nil || len(r.GetUsage()) != 1 || r.GetUsage()[0].GetUnit() != csi.VolumeUsage_BYTES {
		t.Errorf("stats of a live mount = %v, %v", r, err)
	}
	if r, err := health(); err != nil || len(r.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health of a live mount = %v, %v; want no status", r, err)
	}
	if err := syscall.Kill(s.mainPID(target), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the mount to die", func() bool {
		return errors.Is(harness.StatfsWithin(target, time.Second), syscall.ENOTCONN)
	})
	if _, err := stats(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "dead") {
		t.Errorf("stats of a dead mount: %v, want FailedPrecondition naming the dead mount", err)
	}
	r, err := health()
	if err != nil || len(r.GetVolumeHealth().GetHealthStatuses()) != 1 {
		t.Fatalf("health of a dead mount = %v, %v", r, err)
	}
	if h := r.GetVolumeHealth().GetHealthStatuses()[0]; h.GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE || h.GetReason() != "MountDead" {
		t.Errorf("health status = %v", h)
	}
	s.publish(rw(target, "stats")) // kubelet's republish repairs it
	if _, err := stats(); err != nil {
		t.Errorf("stats after the repair: %v", err)
	}
	s.unpublish(target)
	s.assertClean(target)
}

// TestUnresponsiveMountS3: a mount-s3 that stops answering (SIGSTOP) blocks nothing: stats,
// health, republish and unpublish of its volume return within their deadlines with the right
// outcome while another volume keeps being served.
func TestUnresponsiveMountS3(t *testing.T) {
	s := newSuite(t, true, "--health-check-interval=0", "--health-timeout=1s")
	s.s3.CreateBucket(t, "stuck")
	stuck, other := s.target("pod-stuck"), s.target("pod-other")
	s.publish(rw(stuck, "stuck"))
	s.publish(rw(other, "stuck"))
	pid := s.mainPID(stuck)
	if pid <= 0 {
		t.Fatalf("the mount unit of %s has no main PID", stuck)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT); _ = syscall.Kill(pid, syscall.SIGKILL) })
	// kill(2) returns before every thread has stopped; on a loaded machine a thread may still
	// answer a request. Unresponsive means all of them stopped.
	waitFor(t, 5*time.Second, "every thread of mount-s3 (pid "+strconv.Itoa(pid)+") to stop", func() bool { return allStopped(pid) })
	within := func(what string, d time.Duration, call func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		err := call(ctx)
		if took := time.Since(start); took > d {
			t.Errorf("%s took %v, want at most %v", what, took.Round(time.Millisecond), d)
		}
		return err
	}
	err := within("stats", 10*time.Second, func(ctx context.Context) error {
		_, err := s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-stuck", VolumePath: stuck})
		return err
	})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "did not answer") {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Errorf("stats of an unresponsive mount: %v, want FailedPrecondition: did not answer (pid %d %q, all threads stopped: %v)",
			err, pid, strings.ReplaceAll(string(cmdline), "\x00", " "), allStopped(pid))
	}
	if err := within("stats of the other volume", 5*time.Second, func(ctx context.Context) error {
		_, err := s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-stuck", VolumePath: other})
		return err
	}); err != nil {
		t.Errorf("the other volume while one mount-s3 hangs: %v", err)
	}
	// The republish aborts the hung connection and mounts again.
	if err := within("republish", 30*time.Second, func(ctx context.Context) error {
		_, err := s.drv.Node.NodePublishVolume(ctx, rw(stuck, "stuck"))
		return err
	}); err != nil {
		t.Fatalf("republish of an unresponsive mount: %v\n%s", err, tailLog(s.drv.Log()))
	}
	if err := harness.StatfsWithin(stuck, 2*time.Second); err != nil {
		t.Errorf("after the republish: %v", err)
	}
	if err := within("unpublish", 30*time.Second, func(ctx context.Context) error {
		_, err := s.drv.Node.NodeUnpublishVolume(ctx, rwUnpublish(stuck))
		return err
	}); err != nil {
		t.Errorf("unpublish: %v", err)
	}
	s.unpublish(other)
	s.assertClean(stuck)
	s.assertClean(other)
}

// TestSystemdStoppedThenStarted: when the systemd manager stops (SIGTERM: every unit stopped,
// mount-s3 unmounts its own mount at the staging directory and exits), the targets keep the
// binds of a mount no daemon serves, so a write into them fails (ENOTCONN) instead of landing on the node's disk; when systemd comes back, the node
// plugin mounts every target again without kubelet.
func TestSystemdStoppedThenStarted(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "outage")
	a, b := s.target("pod-a"), s.target("pod-b")
	for i, target := range []string{a, b} {
		s.publish(rw(target, "outage"))
		if err := os.WriteFile(filepath.Join(target, fmt.Sprintf("before-%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.sd.Stop(syscall.SIGTERM)
	waitFor(t, 20*time.Second, "mount-s3 to stop serving", func() bool {
		for _, target := range []string{a, b} {
			if harness.StatfsWithin(target, time.Second) == nil {
				return false
			}
		}
		return true
	})
	for _, target := range []string{a, b} {
		err := os.WriteFile(filepath.Join(target, "during-outage"), []byte("lost?"), 0o644)
		if !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("write into %s while no mount-s3 serves it: %v, want ENOTCONN (the dead mount)", target, err)
		}
	}
	s.sd.Start()
	for _, target := range []string{a, b} {
		waitFor(t, 30*time.Second, "the mount to be live again", func() bool {
			return mountS3At(target) && harness.StatfsWithin(target, time.Second) == nil
		})
		if _, err := os.Stat(filepath.Join(target, "during-outage")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a file written during the outage exists: %v", err)
		}
	}
	if keys := s.s3.ListKeys(t, "outage"); len(keys) != 2 {
		t.Errorf("bucket holds %v, want the two files written before the outage", keys)
	}
	s.unpublish(a)
	s.unpublish(b)
	s.assertClean(a)
	s.assertClean(b)
}

// mountS3At reports whether a mount-s3 mount is the top mount at path.
func mountS3At(path string) bool {
	entries, err := mounttable.Table{}.List()
	if err != nil {
		return false
	}
	top := ""
	for _, e := range entries {
		if e.MountPoint == path {
			top = e.Source
		}
	}
	return top == mounttable.FSName
}

// TestUnpublishInEveryState: unpublish succeeds and leaves nothing whatever the target holds:
// a dead mount, one of its two binds unmounted from outside, both, an earlier release's guard
// alone (its mount-s3 mount vanished), nothing, a target already gone;
// and on a node with neither mode available it still clears a never-mounted target.
func TestUnpublishInEveryState(t *testing.T) {
	s := newSuite(t, true, "--health-check-interval=0")
	s.s3.CreateBucket(t, "states")
	dead := s.target("pod-dead")
	s.publish(rw(dead, "states"))
	if err := syscall.Kill(s.mainPID(dead), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the mount to die", func() bool {
		return errors.Is(harness.StatfsWithin(dead, time.Second), syscall.ENOTCONN)
	})
	s.unpublish(dead)
	s.assertClean(dead)

	// One bind unmounted from outside (a cleanup script, a runtime): the other still serves
	// the bucket, so a write lands there and not on the node's disk. Then both.
	for _, n := range []int{1, 2} {
		target := s.target(fmt.Sprintf("pod-unmounted-%d", n))
		s.publish(rw(target, "states"))
		for range n {
			if out, err := osexec.Command("umount", target).CombinedOutput(); err != nil {
				t.Fatalf("umount: %v %s", err, out)
			}
		}
		if n == 1 {
			if err := os.WriteFile(filepath.Join(target, "after-one-umount"), []byte("kept"), 0o644); err != nil {
				t.Errorf("write after one bind was unmounted: %v, want it served by the other", err)
			} else if b := s.s3.GetObject(t, "states", "after-one-umount"); string(b) != "kept" {
				t.Errorf("object written after one bind was unmounted = %q, want it in the bucket", b)
			}
		} else if mountS3At(target) {
			t.Fatal("mount-s3's mount is still there after two unmounts")
		}
		s.unpublish(target)
		s.assertClean(target)
	}
	// A read-only publish stays read-only with one bind left: both are read-only mounts (the
	// kernel refuses the write whatever mount-s3's own --read-only does), and keep the FUSE
	// mount's nosuid and nodev (a read-only remount of a bind resets every per-mount flag).
	roTarget := s.target("pod-unmounted-ro")
	req := rw(roTarget, "states")
	req.Readonly = true
	s.publish(req)
	entries, err := mounttable.Table{}.List()
	if err != nil {
		t.Fatal(err)
	}
	binds := 0
	for _, e := range entries {
		if e.MountPoint == roTarget {
			binds++
			for _, want := range []string{"ro", "nosuid", "nodev"} {
				if !slices.Contains(strings.Split(e.MountOptions, ","), want) {
					t.Errorf("a bind of the read-only publish is mounted %q, want %s", e.MountOptions, want)
				}
			}
		}
	}
	if binds != 2 {
		t.Errorf("the read-only publish holds %d mounts, want 2", binds)
	}
	if out, err := osexec.Command("umount", roTarget).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(roTarget, "through-ro"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into a read-only publish after one bind was unmounted: %v, want EROFS", err)
	}
	s.unpublish(roTarget)
	s.assertClean(roTarget)

	// An earlier release's guard alone with systemd mode's state: its mount-s3 mount vanished.
	guardOnly := s.target("pod-guard")
	s.publish(rw(guardOnly, "states"))
	for range 2 {
		if out, err := osexec.Command("umount", guardOnly).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v %s", err, out)
		}
	}
	if out, err := osexec.Command("mount", "-t", "tmpfs", "-o", "ro,size=4k", mounttable.GuardSource, guardOnly).CombinedOutput(); err != nil {
		t.Fatalf("mount the old guard: %v %s", err, out)
	}
	s.unpublish(guardOnly)
	s.assertClean(guardOnly)

	never := s.target("pod-never") // the target directory kubelet made, nothing mounted
	if err := os.MkdirAll(never, 0o750); err != nil {
		t.Fatal(err)
	}
	s.unpublish(never)
	s.assertClean(never)
	s.unpublish(never) // already gone
	s.unpublish(filepath.Join(s.kubelet, "pods", "no-such-pod", "volumes", "kubernetes.io~csi", "pv", "mount"))
}

// TestUnpublishWithoutAnyMode: a node plugin with systemd mode off (and no API access, so no
// pod mode) still clears a never-mounted target: it never dials systemd for it.
func TestUnpublishWithoutAnyMode(t *testing.T) {
	s := newSuite(t, true, "--systemd-mounter=false", "--systemd-socket=/nonexistent/systemd/private")
	never := s.target("pod-never")
	if err := os.MkdirAll(never, 0o750); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.unpublish(never)
	if _, err := os.Stat(never); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target left: %v", err)
	}
	if strings.Contains(s.drv.Log(), "/nonexistent/systemd") {
		t.Error("the plugin dialed systemd for a target without a mount")
	}
	t.Logf("unpublish took %v", time.Since(start))
}

// TestDeadMountNoticedThroughSystemd: with the periodic check out of the way (an hour), a
// killed mount-s3 is still noticed at once, through systemd's signal that its unit stopped
// running, and repaired; the same for a mount the node plugin found running when it started
// (its unit was running before the plugin's connection), and for a mount-s3 killed again right
// after its repair (the repair's stop of the dead unit is not taken for the new one's). A
// publish and an unpublish, whose units start and stop, are not taken for deaths: a publish
// makes no sweep (each used to probe every mount of the node), an unpublish one (which probes
// nothing).
func TestDeadMountNoticedThroughSystemd(t *testing.T) {
	addr := freeAddr(t)
	s := newSuite(t, true, "--health-check-interval=1h", "--metrics-address="+addr)
	s.s3.CreateBucket(t, "signal")
	target := s.target("pod-a")
	s.publish(rw(target, "signal"))
	repaired := func() float64 {
		return metric(t, addr, "s3csi_node_mount_repairs_total", `mode="systemd"`, `result="succeeded"`)
	}
	killAndWait := func(why string) {
		t.Helper()
		pid := s.mainPID(target)
		before := repaired()
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Until the plugin's repair has returned, not only until the new mount-s3 serves: the
		// repair checks the mount once its unit started, and a kill before that check is a
		// mount-s3 dying at start-up, which the repair reports failed and retries after a
		// back-off (a crash loop must not restart mount-s3 at once, again and again).
		waitFor(t, 15*time.Second, "the mount to be live again with a new mount-s3 ("+why+")", func() bool {
			p := s.mainPID(target)
			return p != 0 && p != pid && harness.StatfsWithin(target, time.Second) == nil && repaired() > before
		})
		t.Logf("%s: repaired %v after the kill, noticed through systemd's unit signal", why, time.Since(killed).Round(time.Millisecond))
	}
	killAndWait("published by this plugin")
	// The repair stopped the dead unit moments ago; the new mount-s3's death is its own.
	killAndWait("killed again right after its repair")

	sweeps := func() float64 { return metric(t, addr, "s3csi_node_mount_sweep_seconds_count") }
	time.Sleep(time.Second) // the repair's own sweeps are over
	before := sweeps()
	other := s.target("pod-b")
	s.publish(rw(other, "signal"))
	time.Sleep(time.Second) // a signal's sweep would be done by now
	if n := sweeps() - before; n != 0 {
		t.Errorf("a publish made %v sweeps, want none (its unit's start taken for a death)", n)
	}
	s.unpublish(other)
	time.Sleep(time.Second)
	if n := sweeps() - before; n != 1 {
		t.Errorf("an unpublish made %v sweeps, want one (the unpublish's own; its unit's stop is not a death)", n)
	}

	// A plugin started while the unit runs learns of it from systemd, not from a signal.
	s.drv.Restart()
	waitFor(t, 10*time.Second, "the restarted plugin's first sweep", func() bool {
		text, err := harness.Scrape("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		n, _ := harness.MetricSum(text, "s3csi_node_mount_sweep_seconds_count")
		return n >= 1
	})
	killAndWait("running before the plugin started")
	s.unpublish(target)
	s.assertClean(target)
}

// TestStuckSystemd: a systemd manager that stops answering (SIGSTOP) makes a publish fail
// Unavailable within --systemd-timeout instead of hanging, while the node plugin keeps serving
// volumes that are already mounted; once systemd answers again, publishing works.
func TestStuckSystemd(t *testing.T) {
	s := newSuite(t, true, "--systemd-timeout=2s", "--health-check-interval=0")
	s.s3.CreateBucket(t, "stuck")
	live := s.target("pod-live")
	s.publish(rw(live, "stuck"))
	s.sd.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { s.sd.Signal(syscall.SIGCONT) })

	blocked := s.target("pod-blocked")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := s.drv.Node.NodePublishVolume(ctx, rw(blocked, "stuck"))
	took := time.Since(start)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "systemd") {
		t.Errorf("publish with systemd stopped: %v, want Unavailable naming systemd", err)
	}
	if took > 15*time.Second {
		t.Errorf("publish with systemd stopped took %s, want about --systemd-timeout (2s)", took)
	}
	if _, err := s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-stuck", VolumePath: live}); err != nil {
		t.Errorf("stats of a live volume while systemd is stuck: %v", err)
	}
	if err := os.WriteFile(filepath.Join(live, "while-stuck"), []byte("x"), 0o644); err != nil {
		t.Errorf("the live volume stopped working: %v", err)
	}

	s.sd.Signal(syscall.SIGCONT)
	waitFor(t, 30*time.Second, "a publish to succeed once systemd answers", func() bool {
		_, err := s.drv.Node.NodePublishVolume(context.Background(), rw(blocked, "stuck"))
		return err == nil
	})
	s.unpublish(blocked)
	s.unpublish(live)
	s.assertClean(blocked)
	s.assertClean(live)
}

// allStopped reports whether every thread of pid is stopped (state T in /proc/<pid>/task/*/stat).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
