package mountmonitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

type event struct{ reason, msg string }

type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Event(_ mounter.Target, _ bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{reason, msg})
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

type fakeRestarter struct{ calls int }

func (f *fakeRestarter) RestartIfBlind(context.Context, mounter.Target) (string, error) {
	f.calls++
	return "deleted", nil
}

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
	if restarter.calls != 1 {
		t.Errorf("restart-pod applied %d times, want 1", restarter.calls)
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
	if restarter.calls != 2 {
		t.Errorf("recovery applied to %d workloads, want both", restarter.calls)
	}
	m.Sweep(context.Background())
	if len(rec.reasons()) != 6 || len(mode.repairs) != 1 || restarter.calls != 2 {
		t.Errorf("a second round acted again: events %v, repairs %v, restarts %d", rec.reasons(), mode.repairs, restarter.calls)
	}
}
