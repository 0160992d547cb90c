package mountmonitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/inflight"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// fakeMode is a mount mode whose targets are all mount-s3 mounts in a synthetic mount table;
// statfs answers from a map the test sets.
type fakeMode struct {
	mu       sync.Mutex
	targets  []mounter.Target
	repairs  int
	repairOK bool
	onRepair func()
}

func (f *fakeMode) Targets() []mounter.Target { f.mu.Lock(); defer f.mu.Unlock(); return f.targets }
func (f *fakeMode) Recorded(target string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.targets {
		if t.Path == target {
			return true
		}
	}
	return false
}
func (f *fakeMode) Repair(context.Context, string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repairs++
	if !f.repairOK {
		return false, errors.New("systemd is down")
	}
	if f.onRepair != nil {
		f.onRepair()
	}
	return true, nil
}

type event struct{ target, reason, msg string }

type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Event(t mounter.Target, _ bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{t.Path, reason, msg})
}

// of returns the reasons of the events on target, in order.
func (r *fakeRecorder) of(target string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.target == target {
			out = append(out, e.reason)
		}
	}
	return strings.Join(out, ",")
}

func (r *fakeRecorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.reason)
	}
	return out
}

type fakeRestarter struct {
	mu    sync.Mutex
	calls int
}

func (f *fakeRestarter) RestartIfBlind(context.Context, mounter.Target) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return "deleted", nil
}

func (f *fakeRestarter) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func TestMonitorDetectsRepairsAndBacksOff(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dead := true
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if dead {
			return syscall.ENOTCONN
		}
		return nil
	}}
	target := mounter.Target{Path: "/k/pods/a/mount", VolumeID: "v", WorkloadPodName: "w", WorkloadNamespace: "ns", Recovery: mounter.RecoveryRestartPod}
	mode := &fakeMode{targets: []mounter.Target{target}}
	locks := &inflight.Set{}
	rec, restarter := &fakeRecorder{}, &fakeRestarter{}
	m := New(Config{Health: health, Locks: locks, Interval: time.Hour})
	m.Watch(mountmode.Systemd, mode)
	m.SetRecorder(rec)
	m.SetRestarter(restarter)
	ctx := context.Background()

	// Dead, and the repair fails: one MountDead, one MountRepairFailed; the next round is
	// within the back-off, so no second repair.
	m.Sweep(ctx)
	m.Sweep(ctx)
	if mode.repairs != 1 {
		t.Errorf("repairs = %d, want 1 (back-off)", mode.repairs)
	}
	if got := strings.Join(rec.reasons(), ","); got != "MountDead,MountRepairFailed" {
		t.Errorf("events = %s", got)
	}
	// A target kubelet holds is skipped.
	release, _ := locks.TryAcquire(target.Path)
	m.mu.Lock()
	m.targets[target.Path].nextTry = time.Time{}
	m.mu.Unlock()
	m.Sweep(ctx)
	release()
	if mode.repairs != 1 {
		t.Errorf("repaired a target kubelet holds")
	}
	// The repair works: MountRepaired, then the recovery policy.
	mode.repairOK = true
	mode.onRepair = func() { mu.Lock(); dead = false; mu.Unlock() }
	m.Sweep(ctx)
	if got := strings.Join(rec.reasons(), ","); got != "MountDead,MountRepairFailed,MountRepaired,MountRecoveryRestartedPod" {
		t.Errorf("events = %s", got)
	}
	if restarter.count() != 1 {
		t.Errorf("restart-pod applied %d times, want 1", restarter.count())
	}
	// Live now: nothing more happens.
	m.Sweep(ctx)
	if mode.repairs != 2 || len(rec.reasons()) != 4 {
		t.Errorf("a live mount was repaired again or reported: %d repairs, events %v", mode.repairs, rec.reasons())
	}
	// Unpublished: forgotten.
	mode.mu.Lock()
	mode.targets = nil
	mode.mu.Unlock()
	m.Sweep(ctx)
	if len(m.targets) != 0 {
		t.Errorf("state kept for an unpublished target")
	}
}

// unmountingMode is a fakeMode with an Unmount that forgets the target.
type unmountingMode struct {
	fakeMode
	unmounted []string
}

func (u *unmountingMode) Unmount(_ context.Context, target string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.unmounted = append(u.unmounted, target)
	u.targets = nil
	return nil
}

// TestMonitorDropsTargetsKubeletRemoved: a recorded target with nothing mounted whose volume
// directory kubelet removed (its pod went while its mount was already gone, e.g. across a
// reboot) is forgotten through the mode's Unmount instead of being "repaired" again and again;
// one whose directory is there is repaired.
func TestMonitorDropsTargetsKubeletRemoved(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, "pods", "a", "volumes", "kubernetes.io~csi", "pv", "mount")
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	removed := filepath.Join(dir, "pods", "b", "volumes", "kubernetes.io~csi", "pv", "mount")
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}}
	gone := &unmountingMode{fakeMode: fakeMode{targets: []mounter.Target{{Path: removed, VolumeID: "v"}}}}
	here := &fakeMode{targets: []mounter.Target{{Path: kept, VolumeID: "v"}}, repairOK: true}
	m := New(Config{Health: health, Locks: &inflight.Set{}, Interval: time.Hour})
	m.Watch(mountmode.Systemd, gone)
	m.Watch(mountmode.Pod, here)
	m.SetRecorder(&fakeRecorder{})
	m.Sweep(context.Background())
	if len(gone.unmounted) != 1 || gone.unmounted[0] != removed || gone.repairs != 0 {
		t.Errorf("removed target: unmounted %v, repairs %d; want one Unmount, no repair", gone.unmounted, gone.repairs)
	}
	if here.repairs != 1 {
		t.Errorf("target still there: %d repairs, want 1", here.repairs)
	}
}

// sharedMode is a mode whose two targets show one mount (pod mode's workloads of one Mountpoint
// Pod): the repair of either makes both live (a bind on one propagates to the other).
type sharedMode struct {
	fakeMode
	dead    *bool
	mu2     *sync.Mutex
	repairs []string
}

func (s *sharedMode) SharingMount(target string) []string {
	var out []string
	for _, t := range s.targets {
		if t.Path != target {
			out = append(out, t.Path)
		}
	}
	return out
}

func (s *sharedMode) Repair(_ context.Context, target string) (bool, error) {
	s.mu2.Lock()
	defer s.mu2.Unlock()
	s.repairs = append(s.repairs, target)
	*s.dead = false
	return true, nil
}

// TestMonitorSharedMount: when the mount two workloads share dies, both get MountDead; the
// repair through one makes the other live too (propagation), and that one still gets its
// MountRepaired and its recovery policy (restart-pod for a container that cannot see the new
// mount) although the monitor never repaired it itself.
func TestMonitorSharedMount(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw\n11 1 0:40 / /k/pods/b/mount rw - fuse mountpoint-s3 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dead := true
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if dead {
			return syscall.ENOTCONN
		}
		return nil
	}}
	a := mounter.Target{Path: "/k/pods/a/mount", VolumeID: "v", WorkloadPodName: "a", WorkloadNamespace: "ns", Recovery: mounter.RecoveryRestartPod}
	b := mounter.Target{Path: "/k/pods/b/mount", VolumeID: "v", WorkloadPodName: "b", WorkloadNamespace: "ns", Recovery: mounter.RecoveryRestartPod}
	mode := &sharedMode{fakeMode: fakeMode{targets: []mounter.Target{a, b}}, dead: &dead, mu2: &mu}
	rec, restarter := &fakeRecorder{}, &fakeRestarter{}
	m := New(Config{Health: health, Locks: &inflight.Set{}, Interval: time.Hour})
	m.Watch(mountmode.Pod, mode)
	m.SetRecorder(rec)
	m.SetRestarter(restarter)
	m.Sweep(context.Background())
	if len(mode.repairs) != 1 {
		t.Errorf("repairs %v, want one (the shared mount)", mode.repairs)
	}
	if got := strings.Join(rec.reasons(), ","); got != "MountDead,MountDead,MountRepaired,MountRecoveryRestartedPod,MountRepaired,MountRecoveryRestartedPod" {
		t.Errorf("events = %s, want both workloads dead, then each repaired and restarted", got)
	}
	if restarter.count() != 2 {
		t.Errorf("recovery applied to %d workloads, want both", restarter.count())
	}
	m.Sweep(context.Background())
	if len(rec.reasons()) != 6 || len(mode.repairs) != 1 || restarter.count() != 2 {
		t.Errorf("a second round acted again: events %v, repairs %v, restarts %d", rec.reasons(), mode.repairs, restarter.count())
	}
}

// TestRepublishRepairIsReported: kubelet's republish gets to a dead mount before any check
// (the monitor's next round is an hour away) and repairs it. The monitor still reports it as
// its own repair: MountDead on the target and on the target sharing its mount, MountRepaired
// and the recovery policy once the publish succeeded, the repair counted; the sharing target,
// live again by propagation, gets its MountRepaired and recovery at the next round. A failed
// publish leaves the target dead for the monitor to repair; a first publish and a live mount
// are not reported at all.
func TestRepublishRepairIsReported(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw\n11 1 0:40 / /k/pods/b/mount rw - fuse mountpoint-s3 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dead := true
	setDead := func(d bool) { mu.Lock(); dead = d; mu.Unlock() }
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if dead {
			return syscall.ENOTCONN
		}
		return nil
	}}
	a := mounter.Target{Path: "/k/pods/a/mount", VolumeID: "v", WorkloadPodName: "a", WorkloadNamespace: "ns", Recovery: mounter.RecoveryRestartPod}
	b := mounter.Target{Path: "/k/pods/b/mount", VolumeID: "v", WorkloadPodName: "b", WorkloadNamespace: "ns", Recovery: mounter.RecoveryRestartPod}
	mode := &sharedMode{fakeMode: fakeMode{targets: []mounter.Target{a, b}}, dead: &dead, mu2: &mu}
	locks := &inflight.Set{}
	rec, restarter := &fakeRecorder{}, &fakeRestarter{}
	m := New(Config{Health: health, Locks: locks, Interval: time.Hour})
	m.Watch(mountmode.Pod, mode)
	m.SetRecorder(rec)
	m.SetRestarter(restarter)
	ctx := context.Background()
	// publish runs one publish of t the way the node server does: lock, Publishing, the mount
	// (which makes the shared mount live when it succeeds), done.
	publish := func(t mounter.Target, ok bool) {
		release, _ := locks.Acquire(ctx, t.Path)
		defer release()
		done := m.Publishing(ctx, t)
		var err error
		if ok {
			setDead(false)
		} else {
			err = errors.New("mount-s3 failed")
		}
		done(ctx, err)
	}
	waitRestarts := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); restarter.count() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if got := restarter.count(); got != n {
			t.Fatalf("restart-pod applied %d times, want %d", got, n)
		}
	}

	// A first publish: no record, nothing reported, nothing counted.
	publish(mounter.Target{Path: "/k/pods/c/mount", VolumeID: "v", WorkloadPodName: "c", WorkloadNamespace: "ns"}, true)
	if len(rec.reasons()) != 0 || testutil.ToFloat64(m.metrics.repairs.WithLabelValues("pod", "succeeded")) != 0 {
		t.Fatalf("a first publish was reported: events %v", rec.reasons())
	}
	// A republish that fails on the dead mount: MountDead for both, one failed repair, no
	// MountRepaired, and the monitor's next round repairs it.
	setDead(true)
	publish(a, false)
	if got, want := rec.of(a.Path)+" / "+rec.of(b.Path), "MountDead / MountDead"; got != want {
		t.Errorf("events after a failed republish: %s, want %s", got, want)
	}
	if got := testutil.ToFloat64(m.metrics.repairs.WithLabelValues("pod", "failed")); got != 1 {
		t.Errorf("failed repairs counted %v, want 1", got)
	}
	// The next republish repairs it: MountRepaired and restart-pod for a, not a second
	// MountDead; counted as a repair that succeeded.
	drain := func() bool {
		select {
		case <-m.trigger:
			return true
		default:
			return false
		}
	}
	drain()
	publish(a, true)
	if !drain() {
		t.Error("a republish that repaired did not trigger a check (of the targets sharing its mount)")
	}
	waitRestarts(1)
	if got, want := rec.of(a.Path), "MountDead,MountRepaired,MountRecoveryRestartedPod"; got != want {
		t.Errorf("events on the republished target: %s, want %s", got, want)
	}
	if got := testutil.ToFloat64(m.metrics.repairs.WithLabelValues("pod", "succeeded")); got != 1 {
		t.Errorf("successful repairs counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.dead.WithLabelValues("pod")); got != 2 {
		t.Errorf("dead mounts counted %v, want 2 (both targets, once)", got)
	}
	// b, live again by propagation, gets its MountRepaired and its recovery at the next round.
	m.Sweep(ctx)
	waitRestarts(2)
	if got, want := rec.of(b.Path), "MountDead,MountRepaired,MountRecoveryRestartedPod"; got != want {
		t.Errorf("events on the sharing target: %s, want %s", got, want)
	}
	if len(mode.repairs) != 0 {
		t.Errorf("the monitor repaired %v itself", mode.repairs)
	}
	// A republish of the live mount: nothing more.
	n := len(rec.reasons())
	publish(a, true)
	m.Sweep(ctx)
	if len(rec.reasons()) != n || restarter.count() != 2 {
		t.Errorf("a live mount's republish was reported: events %v", rec.reasons())
	}
	// An unpublish asks for a check of every target at once.
	drain()
	m.Unpublished(a.Path)
	if !drain() {
		t.Error("an unpublish did not trigger a check")
	}
}

// TestPeriodicChecksProbeWithinTheBound: a periodic sweep asks at most ProbesPerCheck daemons,
// those asked longest ago first (so every one within ceil(daemons/bound) sweeps), one probe per
// daemon however many binds share it; Sweep (a trigger) asks them all; an unpublish's sweep asks
// none; a daemon found dead is asked again at every sweep until it serves, not left to the
// rotation.
func TestPeriodicChecksProbeWithinTheBound(t *testing.T) {
	var table strings.Builder
	table.WriteString("1 0 8:1 / / rw - ext4 /dev/vda rw\n")
	var targets []mounter.Target
	// 10 systemd-like mounts (a daemon each), and 5 binds of one Mountpoint Pod's mount.
	for i := 0; i < 10; i++ {
		p := filepath.Join("/k/pods", strconv.Itoa(i), "mount")
		fmt.Fprintf(&table, "%d 1 0:%d / %s rw - fuse mountpoint-s3 rw\n", 10+i, 40+i, p)
		targets = append(targets, mounter.Target{Path: p, VolumeID: "v"})
	}
	for i := 0; i < 5; i++ {
		p := filepath.Join("/k/pods", "shared"+strconv.Itoa(i), "mount")
		fmt.Fprintf(&table, "%d 1 0:99 / %s rw - fuse mountpoint-s3 rw\n", 30+i, p)
		targets = append(targets, mounter.Target{Path: p, VolumeID: "shared"})
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte(table.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	probed := map[string]int{}
	deadPath := ""
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(p string) error {
		mu.Lock()
		defer mu.Unlock()
		probed[p]++
		if p == deadPath {
			return syscall.ENOTCONN
		}
		return nil
	}}
	take := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := probed
		probed = map[string]int{}
		return out
	}
	mode := &fakeMode{targets: targets}
	locks := &inflight.Set{}
	m := New(Config{Health: health, Locks: locks, Interval: time.Hour, ProbesPerCheck: 4})
	m.Watch(mountmode.Systemd, mode)
	ctx := context.Background()

	// A target kubelet holds is not probed (a statfs pins the mount its unmount removes); a
	// shared mount is probed through another of its targets.
	held, _ := locks.TryAcquire(targets[0].Path)
	heldShared, _ := locks.TryAcquire(targets[10].Path)
	m.Sweep(ctx)
	got := take()
	held()
	heldShared()
	if got[targets[0].Path] != 0 || got[targets[10].Path] != 0 {
		t.Errorf("probed a target kubelet holds: %v", got)
	}
	if len(got) != 10 {
		t.Errorf("a triggered sweep with one own target held probed %d daemons, want the 10 others (9 own, 1 shared through another bind): %v", len(got), got)
	}
	m.Sweep(ctx)
	if got := take(); len(got) != 11 {
		t.Fatalf("a triggered sweep probed %d daemons, want all 11 (10 own, 1 shared by 5 binds): %v", len(got), got)
	}
	seen := map[string]int{}
	for round := 0; round < 3; round++ {
		m.sweep(ctx, probeDue)
		got := take()
		if len(got) > 4 {
			t.Fatalf("periodic sweep %d probed %d daemons, want at most 4: %v", round, len(got), got)
		}
		for p, n := range got {
			seen[p] += n
		}
	}
	if len(seen) != 11 {
		t.Fatalf("3 periodic sweeps of at most 4 probes reached %d daemons, want every one of the 11 (longest ago first): %v", len(seen), seen)
	}
	for p, n := range seen {
		if n > 2 {
			t.Errorf("%s probed %d times in 3 periodic sweeps of 4 probes for 11 daemons, want at most twice (the others were due first)", p, n)
		}
	}
	m.sweep(ctx, tableOnly)
	if got := take(); len(got) != 0 {
		t.Errorf("an unpublish's sweep probed %v, want nothing", got)
	}

	// A daemon found dead whose repair fails stays dead, and is probed at every sweep.
	mu.Lock()
	deadPath = targets[3].Path
	mu.Unlock()
	m.Sweep(ctx)
	take()
	for round := 0; round < 3; round++ {
		m.sweep(ctx, probeDue)
		if got := take(); got[deadPath] == 0 {
			t.Fatalf("periodic sweep %d did not probe the dead mount %s: %v", round, deadPath, got)
		}
	}
	if v := testutil.ToFloat64(m.metrics.mounts.WithLabelValues(string(mountmode.Systemd), "dead")); v != 1 {
		t.Errorf("dead mounts = %v, want 1", v)
	}
}

// endingMode is a fakeMode that tells how its daemon ended.
type endingMode struct {
	fakeMode
	ending mounter.Ending
	asked  chan time.Time
}

func (e *endingMode) HowItEnded(_ context.Context, _ string, since time.Time) mounter.Ending {
	e.asked <- since
	return e.ending
}

// TestOOMKillIsReported: after a repair, a mode that says the kernel's OOM killer ended the
// daemon gets a Warning Event MountOOMKilled with its detail, after MountRepaired, and the
// counter; a daemon that ended otherwise gets no such Event.
func TestOOMKillIsReported(t *testing.T) {
	for _, oom := range []bool{true, false} {
		t.Run(fmt.Sprintf("oom=%v", oom), func(t *testing.T) {
			info := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var dead atomic.Bool
			dead.Store(true)
			health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(string) error {
				if dead.Load() {
					return syscall.ENOTCONN
				}
				return nil
			}}
			target := mounter.Target{Path: "/k/pods/a/mount", VolumeID: "v", WorkloadPodName: "w", WorkloadNamespace: "ns"}
			mode := &endingMode{fakeMode: fakeMode{targets: []mounter.Target{target}, repairOK: true, onRepair: func() { dead.Store(false) }}, asked: make(chan time.Time, 1)}
			if oom {
				mode.ending = mounter.Ending{OOMKilled: true, Detail: "mount-s3 in Mountpoint Pod mount-s3/mp-1 was OOM-killed at its memory limit 256Mi"}
			}
			rec := &fakeRecorder{}
			m := New(Config{Health: health, Locks: &inflight.Set{}, Interval: time.Hour})
			m.Watch(mountmode.Pod, mode)
			m.SetRecorder(rec)
			before := time.Now()
			m.Sweep(context.Background())
			select {
			case since := <-mode.asked:
				if since.Before(before) || since.After(time.Now()) {
					t.Errorf("asked how it ended since %v, want the death's detection time", since)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the mode was not asked how its daemon ended")
			}
			want := "MountDead,MountRepaired"
			if oom {
				want += ",MountOOMKilled"
			}
			var got string
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if got = rec.of(target.Path); got == want {
					break
				}
			}
			if got != want {
				t.Errorf("events %s, want %s", got, want)
			}
			if oom {
				rec.mu.Lock()
				msg := rec.events[len(rec.events)-1].msg
				rec.mu.Unlock()
				if !strings.Contains(msg, "OOM-killed at its memory limit 256Mi") || !strings.Contains(msg, "mountpointMemoryLimit") {
					t.Errorf("MountOOMKilled message %q lacks the limit or the advice", msg)
				}
			}
			if n := testutil.ToFloat64(m.metrics.oom.WithLabelValues("pod")); n != map[bool]float64{true: 1, false: 0}[oom] {
				t.Errorf("s3csi_node_mount_oom_killed_total{mode=pod} = %v", n)
			}
		})
	}
}

// TestPeriodicSweepsReuseACostlyTable: while the mount table is costly to read (here: any
// cost, the share set to almost nothing), a periodic sweep uses the last read again, so a
// target unmounted behind the monitor's back still shows as mounted there; a probe that reaches
// another filesystem at the target (mounthealth.ErrNotFUSE) makes it looked up again and found
// gone at once; and after a publish (or an unpublish, a repair) the next periodic sweep reads
// the table. With the default share, a small table is read at every sweep.
func TestPeriodicSweepsReuseACostlyTable(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	const mounted = "1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw\n"
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(info, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var probeErr error
	health := &mounthealth.Checker{Table: mounttable.Table{Path: info}, Statfs: func(string) error {
		mu.Lock()
		defer mu.Unlock()
		return probeErr
	}}
	setProbe := func(err error) { mu.Lock(); probeErr = err; mu.Unlock() }
	target := mounter.Target{Path: "/k/pods/a/mount", VolumeID: "v", WorkloadPodName: "w", WorkloadNamespace: "ns"}
	ctx := context.Background()
	start := func(share float64) (*Monitor, *fakeRecorder) {
		write(mounted)
		setProbe(nil)
		m := New(Config{Health: health, Locks: &inflight.Set{}, Interval: time.Second})
		m.table.readShare = share
		m.Watch(mountmode.Systemd, &fakeMode{targets: []mounter.Target{target}, repairOK: false})
		rec := &fakeRecorder{}
		m.SetRecorder(rec)
		m.Sweep(ctx)
		if got := rec.of(target.Path); got != "" {
			t.Fatalf("events %s for a live mount", got)
		}
		write("1 0 8:1 / / rw - ext4 /dev/vda rw\n") // unmounted behind the monitor's back
		return m, rec
	}

	// Reused: the unmount is not seen while the daemon answers the probes.
	m, rec := start(1e-12)
	m.sweep(ctx, probeDue)
	if got := rec.of(target.Path); got != "" {
		t.Fatalf("a periodic sweep read the table again (events %s), want the last read used again", got)
	}
	// The probe reaches the filesystem under the target: looked up again, gone.
	setProbe(fmt.Errorf("%w (filesystem type 0xef53)", mounthealth.ErrNotFUSE))
	m.sweep(ctx, probeDue)
	if got := rec.of(target.Path); !strings.HasPrefix(got, "MountDead") {
		t.Fatalf("events %q after a probe found no FUSE mount, want MountDead", got)
	}

	// A publish elsewhere: the next periodic sweep reads the table.
	m, rec = start(1e-12)
	m.Publishing(ctx, mounter.Target{Path: "/k/pods/b/mount"})(ctx, nil)
	m.sweep(ctx, probeDue)
	if got := rec.of(target.Path); !strings.HasPrefix(got, "MountDead") {
		t.Fatalf("events %q after a publish, want MountDead (the table read again)", got)
	}
	// An unpublish, the same.
	m, rec = start(1e-12)
	m.Unpublished("/k/pods/b/mount")
	m.sweep(ctx, probeDue)
	if got := rec.of(target.Path); !strings.HasPrefix(got, "MountDead") {
		t.Fatalf("events %q after an unpublish, want MountDead (the table read again)", got)
	}

	// The default share: a two-line table reads in microseconds, it is read at every sweep.
	m, rec = start(tableReadShare)
	m.sweep(ctx, probeDue)
	if got := rec.of(target.Path); !strings.HasPrefix(got, "MountDead") {
		t.Fatalf("events %q with the default share, want MountDead (a cheap table is read at every sweep)", got)
	}
}
