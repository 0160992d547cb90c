// Package mountmonitor watches the node's S3 mounts without waiting for kubelet: it checks every
// target the mount modes published (mounthealth: mount-s3 must answer within a deadline),
// reports a dead or vanished mount (an Event on the workload pod, metrics, a log line), and
// repairs it on the host side at once through the mode that made it, so new containers, and
// containers restarted by kubelet, get a live mount; running containers whose volumeMount has
// HostToContainer propagation see it live again without a restart.
//
// It checks every target periodically (Interval: every target looked up in one read of the
// mount table, at most ProbesPerCheck mount-s3 daemons probed, one probe per daemon), and at
// once when told something may have died (Trigger: a systemd unit left "active", a Mountpoint
// Pod's mount-s3 exited; every daemon probed) or an unpublish took mounts away. Repairs
// of one target back off (Interval doubling up to a minute) while they keep failing. A target
// kubelet is working on (the node server holds its lock) is skipped until the next round.
package mountmonitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
)

// Event reasons, on the workload pod.
const (
	ReasonMountDead         = "MountDead"
	ReasonMountRepaired     = "MountRepaired"
	ReasonMountRepairFailed = "MountRepairFailed"
	ReasonPodRestarted      = "MountRecoveryRestartedPod"
	// ReasonOOMKilled follows MountRepaired when the mode tells that the kernel's OOM killer
	// ended the mount-s3 (mounter.EndReporter), with the limit it hit.
	ReasonOOMKilled = "MountOOMKilled"
)

// Locker serialises the monitor with the node server's operations on a target: the monitor
// takes a target only when no call holds it, and calls wait for the monitor (inflight.Set).
type Locker interface {
	TryAcquireBackground(key string) (release func(), ok bool)
}

// Restarter applies the restart-pod recovery policy after a repair: it deletes the workload pod
// when it has an owner and one of its containers mounts the volume without HostToContainer
// propagation, and says what it did (for the Event).
type Restarter interface {
	RestartIfBlind(ctx context.Context, t mounter.Target) (string, error)
}

// Recorder reports what happened to a target's mount on its workload pod. warning is false
// for a repair that succeeded.
type Recorder interface {
	Event(target mounter.Target, warning bool, reason, message string)
}

// Config configures a Monitor.
type Config struct {
	// Health judges the mounts.
	Health *mounthealth.Checker
	// Locks are the node server's per-target locks.
	Locks Locker
	// Interval is the period of the full check (default 2 s).
	Interval time.Duration
	// ProbesPerCheck bounds how many mount-s3 daemons a periodic check asks to answer
	// (DefaultProbesPerCheck when zero; negative: every one, every time). Every check still
	// looks every target up in the mount table; a Trigger probes them all.
	ProbesPerCheck int
}

// DefaultProbesPerCheck is Config.ProbesPerCheck's default: below it every mount is probed at
// every check; at 1,000 mounts each is probed every 10 checks.
const DefaultProbesPerCheck = 100

// Monitor checks and repairs the mounts of one node.
type Monitor struct {
	cfg       Config
	modes     map[mountmode.Mode]mounter.Repairer
	recorder  Recorder
	restarter Restarter
	trigger   chan struct{}
	metrics   *metrics

	mu       sync.Mutex
	targets  map[string]*targetState
	probedAt map[string]time.Time // last probe by mounthealth.ProbeKey
	pending  sweepKind            // what the trigger asks for
	table    tableCache           // the last read of the mount table, for periodic sweeps
}

// tableCache is the mount table as a sweep last read it. A periodic sweep uses it again instead
// of reading the table while it is younger than its read took divided by readShare and nothing
// the node plugin did may have changed the table since (stale): on a node with a thousand
// mounts a read of /proc/self/mountinfo takes the kernel milliseconds (about 8 ms for 3,000
// lines on a 2-core machine) and was most of an idle node plugin's CPU. A mount that someone
// else unmounts is then seen by the first probe of its target (mounthealth.ErrNotFUSE) or the
// next read, within seconds (8 s at 3,000 lines); a daemon's exit is signalled anyway (Trigger).
type tableCache struct {
	snap      mounthealth.Snapshot
	at        time.Time     // when it was read
	cost      time.Duration // how long the read took
	stale     bool          // a publish, unpublish or repair happened since
	readShare float64       // the share of one core periodic reads may take (tableReadShare)
}

// tableReadShare bounds the CPU of the periodic sweeps' table reads to 0.1 % of a core: a table
// that reads in 2 ms or less is read at every sweep (every 2 s), a slower one less often.
const tableReadShare = 0.001

// tableChanged tells the monitor that the mount table may have changed (a publish, an unpublish,
// a repair): the next sweep reads it.
func (m *Monitor) tableChanged() {
	m.mu.Lock()
	m.table.stale = true
	m.mu.Unlock()
}

// snapshot returns the mount table for a sweep of kind: a fresh read, except for a periodic
// sweep (probeDue) while the last read is still good (see tableCache).
func (m *Monitor) snapshot(kind sweepKind) (mounthealth.Snapshot, error) {
	m.mu.Lock()
	c := &m.table
	if kind == probeDue && c.snap != nil && !c.stale {
		maxAge := time.Duration(float64(c.cost) / c.readShare)
		if maxAge > m.cfg.Interval && time.Since(c.at) < maxAge {
			snap := c.snap
			m.mu.Unlock()
			return snap, nil
		}
	}
	c.stale = false // a change from now on is not in this read
	m.mu.Unlock()
	start := time.Now()
	snap, err := m.cfg.Health.Snapshot()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		c.snap = nil
		return nil, err
	}
	c.snap, c.at, c.cost = snap, start, time.Since(start)
	return snap, nil
}

// targetState is what the monitor remembers about one target between rounds.
type targetState struct {
	lastLive  time.Time // last check that found it live
	deadSince time.Time // first check that found it dead (zero: not dead)
	failures  int       // repairs that failed in a row
	nextTry   time.Time // no repair before this
}

// New returns a Monitor; Run starts it. Register its metrics with Collectors.
func New(cfg Config) *Monitor {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Health == nil {
		cfg.Health = &mounthealth.Checker{}
	}
	if cfg.ProbesPerCheck == 0 {
		cfg.ProbesPerCheck = DefaultProbesPerCheck
	}
	return &Monitor{cfg: cfg, modes: map[mountmode.Mode]mounter.Repairer{}, trigger: make(chan struct{}, 1), metrics: newMetrics(),
		targets: map[string]*targetState{}, probedAt: map[string]time.Time{}, table: tableCache{readShare: tableReadShare}}
}

// Targets lists the targets the watched modes have published (from their records), so the
// Node service can find a volume's mounts when the caller gives no path.
func (m *Monitor) Targets() []mounter.Target {
	var out []mounter.Target
	for _, r := range m.modes {
		out = append(out, r.Targets()...)
	}
	return out
}

// SetRecorder makes the monitor report Events (without one it only logs). Call before Run.
func (m *Monitor) SetRecorder(r Recorder) { m.recorder = r }

// SetRestarter enables the restart-pod recovery policy (without one it is logged and skipped).
// Call before Run.
func (m *Monitor) SetRestarter(r Restarter) { m.restarter = r }

// Watch adds a mount mode to watch. Call before Run.
func (m *Monitor) Watch(mode mountmode.Mode, r mounter.Repairer) { m.modes[mode] = r }

// Trigger asks for a check of every target now, each mount probed (it never blocks).
func (m *Monitor) Trigger() { m.wake(probeAll) }

// wake asks for a sweep of at least kind (it never blocks).
func (m *Monitor) wake(kind sweepKind) {
	m.mu.Lock()
	m.pending = max(m.pending, kind)
	m.mu.Unlock()
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// sweepKind says which mounts a sweep probes; every sweep reads the mount table once and looks
// up every target in it.
type sweepKind int

const (
	// tableOnly probes nothing: an unpublish may have taken binds away with it (the table
	// shows it), no daemon died.
	tableOnly sweepKind = iota
	// probeDue probes at most ProbesPerCheck mounts, those probed longest ago first: the
	// periodic check.
	probeDue
	// probeAll probes every mount: something may have died (Trigger).
	probeAll
)

// probeWorkers is how many probes a sweep runs at once.
const probeWorkers = 8

// Run checks every target at once, then every Interval (probing ProbesPerCheck mounts) and on
// Trigger (probing all), until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	kind := probeAll
	for {
		m.sweep(ctx, kind)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			kind = probeDue
		case <-m.trigger:
			m.mu.Lock()
			kind, m.pending = m.pending, tableOnly
			m.mu.Unlock()
		}
	}
}

// Sweep checks every published target of every mode once, probing every mount, and repairs
// the dead or vanished ones whose back-off allows it.
func (m *Monitor) Sweep(ctx context.Context) { m.sweep(ctx, probeAll) }

// sweepItem is one target in a sweep, with what the sweep's read of the mount table (and its
// probes) found; r is nil when the table could not be read.
type sweepItem struct {
	mode mountmode.Mode
	t    mounter.Target
	all  []mounter.Target
	r    *mounthealth.Result
}

func (m *Monitor) sweep(ctx context.Context, kind sweepKind) {
	start := time.Now()
	defer func() { m.metrics.sweep.Observe(time.Since(start).Seconds()) }()
	modes := make([]mountmode.Mode, 0, len(m.modes))
	for mode := range m.modes {
		modes = append(modes, mode)
	}
	sort.Slice(modes, func(i, j int) bool { return modes[i] < modes[j] })
	// One read of the mount table for the whole sweep (checking each target against a fresh
	// read made a sweep O(targets × mounts)), or a periodic sweep's reuse of the last one; nil
	// when it cannot be read: each check reads it.
	snap, err := m.snapshot(kind)
	if err != nil {
		klog.ErrorS(err, "Sweep: reading the mount table")
	}
	var items []sweepItem
	seen := map[string]bool{}
	for _, mode := range modes {
		targets := m.modes[mode].Targets()
		for _, t := range targets {
			seen[t.Path] = true
			it := sweepItem{mode: mode, t: t, all: targets}
			if snap != nil {
				r := m.cfg.Health.Classify(t.Path, snap)
				it.r = &r
			}
			items = append(items, it)
		}
	}
	if snap != nil && kind != tableOnly {
		m.probe(ctx, items, kind)
	}
	counts := map[mountmode.Mode]map[string]int{}
	for _, mode := range modes {
		counts[mode] = map[string]int{"live": 0, "dead": 0}
	}
	for _, it := range items {
		counts[it.mode][m.check(ctx, it.mode, it.t, it.all, it.r)]++
	}
	m.metrics.setMounts(counts)
	m.mu.Lock()
	for path := range m.targets {
		if !seen[path] {
			delete(m.targets, path) // unpublished
		}
	}
	m.mu.Unlock()
}

// probe asks the daemons behind the sweep's mount-s3 mounts to answer, once per daemon (a
// Mountpoint Pod's mount answers for every bind of it), at most probeWorkers at a time, and
// records the answers in the items (see probeOne). A probeDue sweep asks at most ProbesPerCheck daemons,
// those asked longest ago first, so that a node's probing costs the same at a thousand mounts
// as at a hundred; a daemon's exit is seen at once anyway (the unit's signal, the Mountpoint
// Pod's mount.err), the probes are the safety net and what finds a daemon that hangs.
func (m *Monitor) probe(ctx context.Context, items []sweepItem, kind sweepKind) {
	byKey := map[string][]int{}
	for i := range items {
		if r := items[i].r; r.Unprobed {
			k := mounthealth.ProbeKey(*r)
			byKey[k] = append(byKey[k], i)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	m.mu.Lock()
	if limit := m.cfg.ProbesPerCheck; kind == probeDue && limit > 0 && len(keys) > limit {
		sort.Slice(keys, func(i, j int) bool { return m.probedAt[keys[i]].Before(m.probedAt[keys[j]]) })
		keys = keys[:limit]
	}
	m.mu.Unlock()
	errs := make([]error, len(keys))
	probed := make([]bool, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(probeWorkers, len(keys)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				probed[i], errs[i] = m.probeOne(ctx, items, byKey[keys[i]])
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range keys {
		if !probed[i] {
			continue // every target of it busy with kubelet: next round
		}
		m.probedAt[k] = now
		for _, idx := range byKey[k] {
			r := items[idx].r
			r.Unprobed = false
			if errs[i] != nil {
				r.State, r.Cause = mounthealth.Dead, errs[i]
			}
		}
	}
	for k := range m.probedAt {
		if _, ok := byKey[k]; !ok {
			delete(m.probedAt, k) // unmounted
		}
	}
}

// Sharer is implemented by a mode whose targets can share one mount (pod mode: the workloads of
// one Mountpoint Pod): when that mount dies they all die. Each is then repaired in turn; where
// the binds are peers of each other (pod mode on kernels before 5.12), a bind mounted on one of
// them propagates to the others, which are then live again without a repair of their own.
type Sharer interface {
	// SharingMount lists the other targets that show the same mount as target.
	SharingMount(target string) []string
}

// probeOne probes the daemon behind the items at idx (one mount) through the first of their
// targets kubelet is not working on, holding that target's lock meanwhile: a statfs in flight
// pins the mount, so an unpublish's unmount at the same time would fail (target is busy).
// probed is false when every one of them was held.
func (m *Monitor) probeOne(ctx context.Context, items []sweepItem, idx []int) (probed bool, err error) {
	for _, i := range idx {
		release, ok := m.cfg.Locks.TryAcquireBackground(items[i].t.Path)
		if !ok {
			continue
		}
		err = m.cfg.Health.Probe(ctx, items[i].t.Path)
		release()
		return true, err
	}
	return false, nil
}

// check handles one target and returns "live" or "dead" (dead includes vanished). all is the
// mode's targets (for the targets sharing a mount with t). r, when not nil, is what the sweep
// found (its read of the mount table, and its probe, made before check took t's lock); t is looked up
// again, under its lock, when r shows it gone, foreign or dead (it may have been published or
// repaired since), or when r was not probed and t is known dead (a dead daemon's mount stays in
// the table until it is unmounted: only a probe says it serves again).
func (m *Monitor) check(ctx context.Context, mode mountmode.Mode, t mounter.Target, all []mounter.Target, found *mounthealth.Result) string {
	release, ok := m.cfg.Locks.TryAcquireBackground(t.Path)
	if !ok {
		return "live" // kubelet is publishing or unpublishing it right now; next round
	}
	defer release()
	if !m.modes[mode].Recorded(t.Path) {
		return "live" // unpublished since Targets listed it
	}
	st := m.stateOf(t.Path)
	var r mounthealth.Result
	if found != nil {
		r = *found
	}
	if found == nil || r.State != mounthealth.Live || r.Unprobed && !st.deadSince.IsZero() {
		var err error
		if r, err = m.cfg.Health.Check(ctx, t.Path); err != nil {
			klog.ErrorS(err, "Checking a mount", "target", t.Path)
			return "live"
		}
	}
	if r.Unprobed {
		return "live" // in the table, its daemon not asked this round
	}
	now := time.Now()
	if r.State == mounthealth.Live {
		if !st.deadSince.IsZero() {
			// Mounted again by someone else: kubelet's publish, or the repair of a target that
			// shares its mount. Its workload's containers need the same recovery.
			klog.InfoS("Mount is live again", "target", t.Path, "volumeID", t.VolumeID, "mode", mode)
			m.repairedEvent(mode, t, st.deadSince)
			m.recover(ctx, t)
		}
		st.live(now)
		return "live"
	}
	if r.State == mounthealth.Absent && kubeletRemoved(t.Path) {
		// kubelet tore the volume down without an unpublish reaching this mode (its mount died
		// with the node, say): kubelet will not call again; drop the mode's state here.
		if u, ok := m.modes[mode].(unmounter); ok {
			err := u.Unmount(ctx, t.Path)
			m.tableChanged()
			if err != nil {
				klog.ErrorS(err, "Dropping the state of a target kubelet removed", "target", t.Path, "volumeID", t.VolumeID, "mode", mode)
				return "dead"
			}
			klog.InfoS("Dropped the state of a target kubelet removed", "target", t.Path, "volumeID", t.VolumeID, "mode", mode)
			return "live"
		}
	}
	cause := causeOf(r)
	if st.deadSince.IsZero() {
		m.detected(mode, t, st, now, cause)
		m.sharersDead(mode, t, all, now, cause)
	}
	if now.Before(st.nextTry) {
		return "dead"
	}
	start := time.Now()
	repaired, err := m.modes[mode].Repair(ctx, t.Path)
	m.tableChanged()
	if err != nil || repaired {
		m.metrics.repaired(mode, err == nil, time.Since(start))
	}
	if err != nil {
		st.failures++
		backoff := min(m.cfg.Interval<<min(st.failures, 6), time.Minute)
		st.nextTry = now.Add(backoff)
		klog.ErrorS(err, "Repairing a dead mount failed", "target", t.Path, "volumeID", t.VolumeID, "mode", mode, "retryIn", backoff)
		if st.failures == 1 || st.failures%10 == 0 {
			m.event(t, true, ReasonMountRepairFailed, fmt.Sprintf("Mounting volume %s again failed: %v. The node plugin keeps trying; kubelet's next republish will too.", t.VolumeID, err))
		}
		return "dead"
	}
	if repaired {
		klog.InfoS("Repaired a dead mount", "target", t.Path, "volumeID", t.VolumeID, "mode", mode, "duration", time.Since(start))
		m.repairedEvent(mode, t, st.deadSince)
		m.recover(ctx, t)
	}
	st.live(time.Now())
	if repaired {
		// Now the targets sharing the mount: live by propagation, or to repair in turn.
		release()
		for _, s := range m.sharing(mode, t, all) {
			m.check(ctx, mode, s, nil, nil) // after the repair: a fresh read and probe
		}
	}
	return "live"
}

// sharersDead records the targets of all that share t's mount as dead too, whether or not a
// check saw them yet: a repair of t may make them live again (propagation) before one does, and
// they need their Events and recovery all the same. A target someone holds (kubelet publishing
// it) is left to that call and to the next round.
func (m *Monitor) sharersDead(mode mountmode.Mode, t mounter.Target, all []mounter.Target, now time.Time, cause string) {
	for _, s := range m.sharing(mode, t, all) {
		release, ok := m.cfg.Locks.TryAcquireBackground(s.Path)
		if !ok {
			continue
		}
		if sst := m.stateOf(s.Path); sst.deadSince.IsZero() {
			m.detected(mode, s, sst, now, cause)
		}
		release()
	}
}

// Publishing implements the node server's PublishObserver; the node server calls it holding
// t's lock, before kubelet's publish of t, and calls the function it returns with the
// publish's outcome. A publish that finds the mount a mode recorded at t dead or gone repairs
// it (mounter.Mounter.Mount) and must not do so silently: kubelet's republish often gets to a
// dead mount before a check does, and the monitor would then only ever see it live. So the
// repair is reported as the monitor's own: MountDead now (unless a check did already, for t or
// a target sharing its mount), then, once the publish succeeded, MountRepaired, the repair
// metrics and the volume's recovery policy (restart-pod runs in the background, so the publish
// does not wait on the API server). A failed publish is kubelet's to report (FailedMount); the
// monitor keeps the target dead and repairs it on its own schedule.
//
// A first publish (no mode has a record of t) costs a look at the records; a republish of a
// live mount one check (mounthealth, within its deadline).
func (m *Monitor) Publishing(ctx context.Context, t mounter.Target) func(context.Context, error) {
	m.tableChanged()
	nothing := func(context.Context, error) { m.tableChanged() }
	mode, ok := m.recordedBy(t.Path)
	if !ok {
		return nothing
	}
	r, err := m.cfg.Health.Check(ctx, t.Path)
	if err != nil || r.State == mounthealth.Live || r.State == mounthealth.Foreign {
		return nothing // Foreign: the publish fails (target in use) and says why
	}
	cause := causeOf(r)
	now := time.Now()
	st := m.stateOf(t.Path)
	if st.deadSince.IsZero() {
		m.detected(mode, t, st, now, cause)
		m.sharersDead(mode, t, m.modes[mode].Targets(), now, cause)
	}
	return func(ctx context.Context, err error) {
		m.tableChanged()
		m.metrics.repaired(mode, err == nil, time.Since(now))
		if err != nil {
			return
		}
		klog.InfoS("Republish repaired a dead mount", "target", t.Path, "volumeID", t.VolumeID, "mode", mode, "duration", time.Since(now))
		m.repairedEvent(mode, t, st.deadSince)
		st.live(time.Now())
		m.Trigger() // the targets sharing its mount are dead too: repair them now, not at the next round
		if t.Recovery == mounter.RecoveryRestartPod {
			go func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				m.recover(ctx, t)
			}()
		}
	}
}

// Unpublished implements the node server's PublishObserver: after an unpublish, every target
// is checked at once (when the monitor runs). Pod mode binds each target as a peer group of its
// own so that an unmount never reaches another target; where the kernel lacks the calls for
// that (before 5.12), the targets of a Mountpoint Pod are peers, and the unpublish of a target
// that was repaired takes the repair away from the others (the unmount propagates): they must
// be bound again before a workload notices, not at the next periodic round.
func (m *Monitor) Unpublished(string) { m.tableChanged(); m.wake(tableOnly) }

// recordedBy returns the watched mode that has a record of target.
func (m *Monitor) recordedBy(target string) (mountmode.Mode, bool) {
	for mode, r := range m.modes {
		if r.Recorded(target) {
			return mode, true
		}
	}
	return "", false
}

// live records a check (or repair) at now that found the target live.
func (st *targetState) live(now time.Time) {
	st.lastLive, st.deadSince, st.failures, st.nextTry = now, time.Time{}, 0, time.Time{}
}

// causeOf says why a check found a target not live (Dead, or its mount gone).
func causeOf(r mounthealth.Result) string {
	if r.State != mounthealth.Dead {
		return "the mount is gone (" + r.State.String() + ")"
	}
	return fmt.Sprint(r.Cause)
}

// stateOf returns target's state, made on first use.
func (m *Monitor) stateOf(target string) *targetState {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.targets[target]
	if st == nil {
		st = &targetState{}
		m.targets[target] = st
	}
	return st
}

// detected records and reports a target found dead.
func (m *Monitor) detected(mode mountmode.Mode, t mounter.Target, st *targetState, now time.Time, cause string) {
	st.deadSince = now
	m.metrics.detected(mode, st.lastLive, now)
	klog.InfoS("Dead mount detected", "target", t.Path, "volumeID", t.VolumeID, "mode", mode, "cause", cause)
	m.event(t, true, ReasonMountDead, fmt.Sprintf("The S3 mount of volume %s is dead: %s. The node plugin mounts it again.", t.VolumeID, cause))
}

// repairedEvent reports a target live again after being dead since deadSince, and, when its
// mode can tell (mounter.EndReporter) that the kernel's OOM killer ended its mount-s3, says so
// and at what limit (in the background: the mode may ask the API server).
func (m *Monitor) repairedEvent(mode mountmode.Mode, t mounter.Target, deadSince time.Time) {
	m.event(t, false, ReasonMountRepaired, fmt.Sprintf("The S3 mount of volume %s was mounted again after %v. Containers see it again if their volumeMount has mountPropagation: HostToContainer; others see it once restarted.",
		t.VolumeID, time.Since(deadSince).Round(time.Millisecond)))
	er, ok := m.modes[mode].(mounter.EndReporter)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), endReportTimeout)
		defer cancel()
		end := er.HowItEnded(ctx, t.Path, deadSince)
		if !end.OOMKilled {
			return
		}
		m.metrics.oomKilled(mode)
		klog.InfoS("The dead mount's mount-s3 was OOM-killed", "target", t.Path, "volumeID", t.VolumeID, "mode", mode, "detail", end.Detail)
		m.event(t, true, ReasonOOMKilled, fmt.Sprintf("The S3 mount of volume %s died because %s; it was mounted again. Give the volume more memory (docs/sizing.md: mountpointMemoryLimit) if this repeats.",
			t.VolumeID, end.Detail))
	}()
}

// endReportTimeout bounds how long a mode may take to tell how a mount-s3 ended.
const endReportTimeout = 10 * time.Second

// sharing returns the targets of all (the mode's) that share t's mount, when the mode says so.
func (m *Monitor) sharing(mode mountmode.Mode, t mounter.Target, all []mounter.Target) []mounter.Target {
	sh, ok := m.modes[mode].(Sharer)
	if !ok || all == nil {
		return nil
	}
	var out []mounter.Target
	for _, p := range sh.SharingMount(t.Path) {
		for _, o := range all {
			if o.Path == p && p != t.Path {
				out = append(out, o)
			}
		}
	}
	return out
}

// unmounter is the mode's Unmount (every mode has one).
type unmounter interface {
	Unmount(ctx context.Context, target string) error
}

// kubeletRemoved reports whether the directory kubelet makes for a target's volume (the
// target's parent) is gone: kubelet removes it after the volume's teardown, never before a
// publish.
func kubeletRemoved(target string) bool {
	_, err := os.Lstat(filepath.Dir(target))
	return errors.Is(err, fs.ErrNotExist)
}

// recover applies the volume's recovery policy after a repair.
func (m *Monitor) recover(ctx context.Context, t mounter.Target) {
	if t.Recovery != mounter.RecoveryRestartPod {
		return
	}
	if m.restarter == nil {
		klog.InfoS("Recovery policy restart-pod is not enabled on this node plugin (--restart-pods, Helm node.restartPods); the pod was not restarted", "target", t.Path)
		m.event(t, true, ReasonMountRepaired, "The volume asks for recovery policy restart-pod, which this cluster's driver does not enable (Helm value node.restartPods): the pod was not restarted. Delete it to get a live mount in every container.")
		return
	}
	what, err := m.restarter.RestartIfBlind(ctx, t)
	if err != nil {
		klog.ErrorS(err, "Recovery policy restart-pod", "target", t.Path, "pod", t.WorkloadNamespace+"/"+t.WorkloadPodName)
		m.event(t, true, ReasonMountRepaired, fmt.Sprintf("Recovery policy restart-pod could not restart the pod: %v. Delete it to get a live mount in every container.", err))
		return
	}
	if what != "" {
		m.event(t, true, ReasonPodRestarted, what)
	}
}

func (m *Monitor) event(t mounter.Target, warning bool, reason, msg string) {
	if m.recorder != nil && t.WorkloadPodName != "" && t.WorkloadNamespace != "" {
		m.recorder.Event(t, warning, reason, msg)
	}
}

// Collectors returns the monitor's metrics, for a Prometheus registry.
func (m *Monitor) Collectors() []prometheus.Collector { return m.metrics.collectors() }
