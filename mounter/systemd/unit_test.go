package systemd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/mounter"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestUnitNames(t *testing.T) {
	a := MountUnitName("/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount")
	if a != MountUnitName("/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount") {
		t.Fatal("unit name is not deterministic")
	}
	if a == MountUnitName("/var/lib/kubelet/pods/p2/volumes/kubernetes.io~csi/pv/mount") {
		t.Fatal("different targets share a unit name")
	}
	if !regexp.MustCompile(`^mount-s3-[0-9a-f]{16}\.service$`).MatchString(a) {
		t.Errorf("unit name %q does not match mount-s3-<16 hex>.service", a)
	}
	if u := umountUnitName("/x"); !strings.HasPrefix(u, "mount-s3-umount-") || u == MountUnitName("/x") {
		t.Errorf("umount unit name %q", u)
	}
}

// TestPropertiesGolden pins the exact transient-unit properties of a mount: a change must be
// deliberate (go test ./mounter/systemd -run Golden -update).
func TestPropertiesGolden(t *testing.T) {
	spec := unitSpec{
		description: "mount-s3 for S3 CSI volume vol-1 at /var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount",
		kind:        "forking",
		argv:        []string{"/opt/mountpoint-s3-csi/bin/mount-s3", "--allow-delete", "--force-path-style", "bucket", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"},
		env:         []string{"AWS_REGION=us-east-1", "AWS_PROFILE=s3-csi", "AWS_CONFIG_FILE=/state/config", "AWS_SHARED_CREDENTIALS_FILE=/state/credentials", "AWS_ENDPOINT_URL=http://s3:8000"},
		logFile:     "/state/mount-s3.log",
		timeout:     60 * time.Second,
		keepFailed:  true,
		pre:         [][]string{{"/bin/umount", "-f", "-l", "/staging/abc"}},
		post: [][]string{{"/bin/mount", "--no-canonicalize", "--make-private", "/staging/abc"},
			{"/bin/mount", "--no-canonicalize", "--bind", "/staging/abc", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"},
			{"/bin/mount", "--no-canonicalize", "--bind", "/staging/abc", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"}},
	}
	var b strings.Builder
	for _, p := range spec.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	// The unmount of a dead mount-s3 mount's two binds: every command must succeed.
	umount := unitSpec{description: "unmount S3 CSI volume at /t", kind: "oneshot", argv: []string{"/bin/umount", "-f", "/t"},
		more: [][]string{{"/bin/umount", "/t"}}, logFile: "/state/umount.log", timeout: 30 * time.Second}
	b.WriteString("---\n")
	for _, p := range umount.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	// The same mount with the descriptor hand-over: the helper mounts (privileged), mount-s3
	// serves fd 3 with no capability.
	hand := spec
	hand.handover = true
	hand.argv = []string{"/opt/mountpoint-s3-csi/bin/mount-s3", "--allow-delete", "--force-path-style", "bucket", "/dev/fd/3"}
	hand.pre = [][]string{{"/bin/umount", "-f", "-l", "/staging/abc"}, {"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "mount", "/staging/abc"}}
	hand.post = [][]string{{"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "bind", "/staging/abc", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"}}
	b.WriteString("---\n")
	for _, p := range hand.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	// With a dedicated user: mount-s3 runs as it, the "+" commands stay root.
	user := hand
	user.user = &runAs{Name: "s3csi-mount", UID: 990, GID: 990}
	b.WriteString("---\n")
	for _, p := range user.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	// With --mount-s3-protect-system: a mount namespace (only the cache writable), the helper's
	// commands entering the manager's namespace.
	prot := user
	prot.protect = true
	prot.argv = []string{"/opt/mountpoint-s3-csi/bin/mount-s3", "--allow-root", "--cache=/var/cache/s3.csi.scality.com/abc", "bucket", "/dev/fd/3"}
	prot.pre = [][]string{{"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "umount", "--in-manager-namespace", "/staging/abc"}, {"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "mount", "--in-manager-namespace", "--allow-other", "/staging/abc"}}
	prot.post = [][]string{{"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "bind", "--in-manager-namespace", "/staging/abc", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"}}
	b.WriteString("---\n")
	for _, p := range prot.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	// protect without the hand-over: no namespace (mount-s3's own mount would stay in it).
	for _, p := range (unitSpec{protect: true, argv: []string{"/m", "--cache=/c", "b", "/t"}}).properties() {
		if p.Name == "ProtectSystem" || p.Name == "ReadWritePaths" || p.Name == "PrivateTmp" {
			t.Errorf("a unit without the hand-over got %s", p.Name)
		}
	}
	// The oneshot that makes sure the user exists: no sandbox (it may write /etc/shadow).
	ensure := unitSpec{description: "Make sure the user exists", kind: "oneshot", fullPrivileges: true, logFile: "/state/.mount-s3-user.log", timeout: time.Minute,
		argv: []string{"/opt/mountpoint-s3-csi/bin/scality-fuse-helper", "ensure-user", "--ids-file", "/state/.mount-s3-user", "s3csi-mount"}}
	b.WriteString("---\n")
	for _, p := range ensure.properties() {
		fmt.Fprintf(&b, "%s=%s\n", p.Name, p.Value.String())
	}
	golden := filepath.Join("testdata", "mount-unit.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("unit properties changed:\n--- got\n%s--- want\n%s", b.String(), want)
	}
	// Keys the service manager's own environment may carry never reach mount-s3: the unit
	// unsets them (the driver gives credentials as profile files only).
	var unset string
	for _, p := range spec.properties() {
		if p.Name == "UnsetEnvironment" {
			unset = p.Value.String()
		}
	}
	for _, key := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"UNSTABLE_MOUNTPOINT_PID_FILE", "UNSTABLE_MOUNTPOINT_DISABLE_CACHE_CLEANUP", "UNSTABLE_MOUNTPOINT_CLONE_FUSE_FD"} {
		if !strings.Contains(unset, `"`+key+`"`) {
			t.Errorf("the unit does not unset %s: UnsetEnvironment=%s", key, unset)
		}
	}
}

// fakeConn is a scripted dbusConn: it records calls and can drop its connection.
type fakeConn struct {
	mu        sync.Mutex
	connected bool
	calls     []string
	// stopErr is returned by StopUnitContext; dropOnCall drops the connection during the call.
	stopErr    error
	dropOnCall bool
	// jobResult is delivered on the job channel unless hold is set.
	jobResult string
	hold      bool
	// absent makes ListUnitsByPatterns report no loaded unit.
	absent bool
	// hang makes ListUnitsByPatterns block until its context ends (a systemd that does not answer).
	hang bool
	// activeState is the listed unit's ActiveState; result its Service Result property.
	activeState, result string
	// onStart runs when a transient unit is started, before its job ends (what the unit would
	// have done).
	onStart func(name string)
	// startResults overrides jobResult for the start job of the units it names; started keeps
	// the properties each unit was started with.
	startResults map[string]string
	started      map[string][]sd.Property
	// serviceProps answers GetServiceProperty by "unit property" (besides Result).
	serviceProps map[string]any
	// version is the manager's Version ("" for Debian 12's 252).
	version string
}

func (f *fakeConn) record(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if f.dropOnCall {
		f.connected = false
		return false
	}
	return true
}

func (f *fakeConn) job(ch chan<- string) {
	if !f.hold && ch != nil {
		ch <- f.jobResult
	}
}

func (f *fakeConn) StartTransientUnitContext(_ context.Context, name, _ string, props []sd.Property, ch chan<- string) (int, error) {
	if !f.record("start " + name) {
		return 0, dbus.ErrClosed
	}
	f.mu.Lock()
	if f.started == nil {
		f.started = map[string][]sd.Property{}
	}
	f.started[name] = props
	result, scripted := f.startResults[name]
	f.mu.Unlock()
	if f.onStart != nil {
		f.onStart(name)
	}
	if scripted && !f.hold && ch != nil {
		ch <- result
		return 1, nil
	}
	f.job(ch)
	return 1, nil
}

func (f *fakeConn) StopUnitContext(_ context.Context, name, _ string, ch chan<- string) (int, error) {
	if !f.record("stop " + name) {
		return 0, dbus.ErrClosed
	}
	if f.stopErr != nil {
		return 0, f.stopErr
	}
	f.job(ch)
	return 1, nil
}

func (f *fakeConn) ResetFailedUnitContext(_ context.Context, name string) error {
	f.record("reset " + name)
	return nil
}

func (f *fakeConn) ListUnitsByPatternsContext(ctx context.Context, _, patterns []string) ([]sd.UnitStatus, error) {
	if !f.record("list " + strings.Join(patterns, ",")) {
		return nil, dbus.ErrClosed
	}
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.absent {
		return nil, nil
	}
	return []sd.UnitStatus{{Name: patterns[0], ActiveState: f.activeState}}, nil
}

func (f *fakeConn) SystemStateContext(context.Context) (*sd.Property, error) {
	if !f.record("state") {
		return nil, dbus.ErrClosed
	}
	return &sd.Property{Name: "SystemState", Value: dbus.MakeVariant("running")}, nil
}

func (f *fakeConn) SetPropertiesSubscriber(chan<- *sd.PropertiesUpdate, chan<- error) {}

func (f *fakeConn) KillUnitContext(context.Context, string, int32) {}

func (f *fakeConn) GetServicePropertyContext(_ context.Context, name, prop string) (*sd.Property, error) {
	f.record("get " + name + " " + prop)
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.serviceProps[name+" "+prop]; ok {
		return &sd.Property{Name: prop, Value: dbus.MakeVariant(v)}, nil
	}
	if prop != "Result" || f.result == "" {
		return nil, errors.New("no such property")
	}
	return &sd.Property{Name: prop, Value: dbus.MakeVariant(f.result)}, nil
}

func (f *fakeConn) SetUnitPropertiesContext(_ context.Context, name string, _ bool, _ ...sd.Property) error {
	f.record("set " + name)
	return nil
}

func (f *fakeConn) GetManagerProperty(string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version != "" {
		return f.version, nil
	}
	return `"252.38-1~deb12u1"`, nil
}

func (f *fakeConn) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected
}

func (f *fakeConn) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connected = false
}

// dialer hands out the given connections in order, then fails.
func dialer(conns ...*fakeConn) (dialFunc, *int) {
	n := 0
	return func() (dbusConn, error) {
		if n >= len(conns) {
			n++
			return nil, errors.New("connection refused")
		}
		c := conns[n]
		n++
		return c, nil
	}, &n
}

func TestCheckReconnectsAfterDrop(t *testing.T) {
	first := &fakeConn{connected: true}
	second := &fakeConn{connected: true}
	dial, dials := dialer(first, second)
	m := newMounter(Config{}, dial)
	if err := m.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	first.dropOnCall = true // the next call finds the peer gone
	first.mu.Unlock()
	if err := m.Check(context.Background()); err != nil {
		t.Fatalf("Check after a drop: %v; want a transparent retry on a new connection", err)
	}
	if *dials != 2 || len(second.calls) != 1 {
		t.Errorf("dials = %d, calls on the new connection = %v", *dials, second.calls)
	}
	second.Close()
	if err := m.Check(context.Background()); !errors.Is(err, mounter.ErrUnavailable) {
		t.Errorf("Check with systemd gone: %v, want ErrUnavailable", err)
	}
}

func TestStopUnitSkipsUnloadedUnit(t *testing.T) {
	c := &fakeConn{connected: true, absent: true}
	dial, _ := dialer(c)
	m := newMounter(Config{}, dial)
	if err := m.stopUnit(context.Background(), "mount-s3-x.service"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"list mount-s3-x.service"}; !slices.Equal(c.calls, want) {
		t.Errorf("calls = %v, want only %v (no StopUnit for a unit that is not loaded)", c.calls, want)
	}
}

func TestStopUnitToleratesMissingUnit(t *testing.T) {
	c := &fakeConn{connected: true, stopErr: dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"not loaded"}}}
	dial, _ := dialer(c)
	m := newMounter(Config{}, dial)
	if err := m.stopUnit(context.Background(), "mount-s3-x.service"); err != nil {
		t.Fatalf("stopUnit of a missing unit: %v", err)
	}
	c.stopErr = errors.New("access denied")
	if err := m.stopUnit(context.Background(), "mount-s3-x.service"); err == nil {
		t.Fatal("stopUnit hid a real error")
	}
}

func TestRunUnitNoticesLostConnection(t *testing.T) {
	c := &fakeConn{connected: true, hold: true}
	dial, _ := dialer(c)
	m := newMounter(Config{}, dial)
	go func() {
		time.Sleep(50 * time.Millisecond)
		c.Close() // systemd went away while the job was running
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := m.runUnit(ctx, "mount-s3-x.service", unitSpec{kind: "forking", argv: []string{"/bin/true"}})
	if !errors.Is(err, errConnLost) {
		t.Fatalf("err = %v, want errConnLost (not a hang until the deadline)", err)
	}
}

func TestRunUnitHonoursContext(t *testing.T) {
	c := &fakeConn{connected: true, hold: true}
	dial, _ := dialer(c)
	m := newMounter(Config{}, dial)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.runUnit(ctx, "u", unitSpec{kind: "forking", argv: []string{"/bin/true"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

func TestIsNoSuchUnit(t *testing.T) {
	e := dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}
	for _, err := range []error{e, &e, fmt.Errorf("wrapped: %w", e)} {
		if !isNoSuchUnit(err) {
			t.Errorf("isNoSuchUnit(%v) = false", err)
		}
	}
	if isNoSuchUnit(dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}) || isNoSuchUnit(errors.New("x")) {
		t.Error("isNoSuchUnit true for another error")
	}
}

// TestStuckSystemdDoesNotStallTheNode: a dial that never answers (systemd stopped) fails every
// caller with ErrUnavailable within the dial timeout, one dial at a time, without a lock held
// across it; callers then get the failure at once until the backoff passes; a method call
// systemd does not answer is cut at the call timeout.
func TestStuckSystemdDoesNotStallTheNode(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	dials := 0
	stuck := func() (dbusConn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		<-release
		return nil, errors.New("released")
	}
	m := newMounter(Config{}, stuck)
	m.bus.dialTimeout = 200 * time.Millisecond
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan error, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- m.Check(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("callers waited %s for a stuck dial, want about the dial timeout (200ms)", d)
	}
	for err := range errs {
		if !errors.Is(err, mounter.ErrUnavailable) {
			t.Errorf("Check with a stuck systemd: %v, want ErrUnavailable", err)
		}
	}
	mu.Lock()
	if dials != 1 {
		t.Errorf("%d dials for 5 concurrent callers, want 1", dials)
	}
	mu.Unlock()
	// During the backoff the failure is returned at once, with no new dial.
	quick := time.Now()
	if err := m.Check(context.Background()); !errors.Is(err, mounter.ErrUnavailable) || time.Since(quick) > 50*time.Millisecond {
		t.Errorf("Check during the backoff: %v after %s, want ErrUnavailable at once", err, time.Since(quick))
	}
	// A caller whose own deadline is shorter than the dial timeout is not held past it.
	time.Sleep(300 * time.Millisecond) // past the first backoff (100ms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	quick = time.Now()
	if err := m.Check(ctx); !errors.Is(err, mounter.ErrUnavailable) || time.Since(quick) > 150*time.Millisecond {
		t.Errorf("Check with a 20ms deadline: %v after %s", err, time.Since(quick))
	}

	// A connected systemd that stops answering calls.
	hung := &fakeConn{connected: true, hang: true}
	dial, _ := dialer(hung)
	m2 := newMounter(Config{}, dial)
	m2.bus.callTimeout = 100 * time.Millisecond
	quick = time.Now()
	if err := m2.stopUnit(context.Background(), "mount-s3-x.service"); !errors.Is(err, mounter.ErrUnavailable) || time.Since(quick) > time.Second {
		t.Errorf("stopUnit on a hung systemd: %v after %s, want ErrUnavailable after ~100ms", err, time.Since(quick))
	}
}

// TestLeftReadsTheSignal: only a mount unit seen running that stops running, not by the
// mounter's own stop, is reported; a unit starting (start, start-post, then running), a oneshot
// (the unmount units, the user's), another service, another property or a malformed value are
// not.
func TestLeftReadsTheSignal(t *testing.T) {
	const unit = "mount-s3-0123456789abcdef.service"
	sub := func(unit, state string) *sd.PropertiesUpdate {
		return &sd.PropertiesUpdate{UnitName: unit, Changed: map[string]dbus.Variant{"SubState": dbus.MakeVariant(state)}}
	}
	var w unitWatch
	running := map[string]bool{}
	feed := func(u *sd.PropertiesUpdate, want bool) {
		t.Helper()
		if got := w.left(running, u); got != want {
			t.Errorf("left(%s %v) = %v, want %v", u.UnitName, u.Changed, got, want)
		}
	}
	// A start, then mount-s3 killed: one report, at the first state after running.
	for _, state := range []string{"dead", "start", "start-post", "running"} {
		feed(sub(unit, state), false)
	}
	feed(sub(unit, "failed"), true)
	feed(sub(unit, "dead"), false) // no longer running: said once
	// A start that fails never ran: the publish reports it.
	feed(sub(unit, "start"), false)
	feed(sub(unit, "failed"), false)
	// Running, then exited cleanly (someone unmounted it): reported.
	feed(sub(unit, "running"), false)
	feed(sub(unit, "dead"), true)
	// Running, then stopped by the mounter: not reported, during the stop or just after it.
	feed(sub(unit, "running"), false)
	w.stopBegins(unit)
	feed(sub(unit, "stop-sigterm"), false)
	w.stopEnds(unit)
	feed(sub(unit, "dead"), false) // a late signal of that stop
	// Started again (a repair): its death is a death, within the grace too.
	feed(sub(unit, "start"), false)
	feed(sub(unit, "running"), false)
	feed(sub(unit, "failed"), true)
	// Running during the mounter's stop says nothing new: the stop is still its own.
	feed(sub(unit, "running"), false)
	w.stopBegins(unit)
	feed(sub(unit, "running"), false)
	feed(sub(unit, "stop-sigterm"), false)
	w.stopEnds(unit)
	feed(sub(unit, "dead"), false)
	// Once the grace is over, a death is a death again.
	feed(sub(unit, "running"), false)
	w.stopBegins(unit)
	w.stopEnds(unit)
	w.mu.Lock()
	w.stopping[unit] = stop{until: time.Now().Add(-time.Second), ended: true}
	w.mu.Unlock()
	feed(sub(unit, "failed"), true)
	// Not mount units, or not a SubState string.
	for _, other := range []string{"mount-s3-umount-0123456789abcdef.service", userUnitName, "other.service"} {
		feed(sub(other, "running"), false)
		feed(sub(other, "dead"), false)
	}
	feed(sub(unit, "running"), false)
	feed(&sd.PropertiesUpdate{UnitName: unit, Changed: map[string]dbus.Variant{"ActiveState": dbus.MakeVariant("inactive")}}, false)
	feed(&sd.PropertiesUpdate{UnitName: unit, Changed: map[string]dbus.Variant{"SubState": dbus.MakeVariant(7)}}, false)
	feed(sub(unit, "dead"), true) // still running until a SubState said otherwise
}

// TestRecordCache: a cached record is read again once it was written again, and a removed one
// is gone.
func TestRecordCache(t *testing.T) {
	dir := t.TempDir()
	var c recordCache
	if _, err := c.read(dir); err == nil {
		t.Fatal("a directory without a record read as recorded")
	}
	if err := writeRecord(dir, record{VolumeID: "v1", Target: "/t"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if r, err := c.read(dir); err != nil || r.VolumeID != "v1" {
			t.Fatalf("read %d: %+v, %v", i, r, err)
		}
	}
	if err := writeRecord(dir, record{VolumeID: "v2", Target: "/t"}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.read(dir); err != nil || r.VolumeID != "v2" {
		t.Fatalf("after a new write: %+v, %v, want v2", r, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.read(dir); err == nil {
		t.Fatal("a removed record still read")
	}
	if len(c.entries) != 0 {
		t.Errorf("%d entries kept for removed records", len(c.entries))
	}
}

// TestTargetsFromTheRecordCache: between full scans the mounter's own writes and removals are
// the list (no system call per record); a record written behind its back shows at the next
// full scan.
func TestTargetsFromTheRecordCache(t *testing.T) {
	m := &Mounter{cfg: Config{StateDir: t.TempDir()}}
	mk := func(target string) string {
		dir := m.stateDir(target)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	paths := func() []string {
		var out []string
		for _, tg := range m.Targets() {
			out = append(out, tg.Path)
		}
		return out
	}
	if err := writeRecord(mk("/k/a"), record{VolumeID: "v", Target: "/k/a"}); err != nil {
		t.Fatal(err)
	}
	if got := paths(); !slices.Equal(got, []string{"/k/a"}) {
		t.Fatalf("first scan: %v", got)
	}
	if err := m.saveRecord(mk("/k/b"), record{VolumeID: "v", Target: "/k/b"}); err != nil {
		t.Fatal(err)
	}
	if got := paths(); !slices.Equal(got, []string{"/k/a", "/k/b"}) || !m.Recorded("/k/b") {
		t.Fatalf("after saveRecord: %v, recorded %v", got, m.Recorded("/k/b"))
	}
	if err := m.removeState(m.stateDir("/k/a")); err != nil {
		t.Fatal(err)
	}
	if got := paths(); !slices.Equal(got, []string{"/k/b"}) || m.Recorded("/k/a") {
		t.Fatalf("after removeState: %v, recorded %v", got, m.Recorded("/k/a"))
	}
	if err := writeRecord(mk("/k/c"), record{VolumeID: "v", Target: "/k/c"}); err != nil {
		t.Fatal(err)
	}
	if got := paths(); !slices.Equal(got, []string{"/k/b"}) {
		t.Fatalf("a record written behind the mounter's back listed before the next full scan (no scan is made between): %v", got)
	}
	m.records.mu.Lock()
	m.records.scanned = m.records.scanned.Add(-rescanEvery)
	m.records.mu.Unlock()
	if got := paths(); !slices.Equal(got, []string{"/k/b", "/k/c"}) {
		t.Fatalf("after a full scan: %v", got)
	}
}

// TestTailEscapes: mount-s3's output quotes S3 and object names, so what reaches an error (and
// from there an Event) is one line without control or format characters.
func TestTailEscapes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mount-s3.log")
	if err := os.WriteFile(p, []byte("older output\nError: key \x1b]0;title\x07 \u2066x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := tail(p, 4096), `older output\nError: key \x1b]0;title\x07 \u2066x`; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
	if got, want := tail(p, 12), `title\x07 \u2066x`; got != want {
		t.Errorf("tail of 12 bytes = %q, want %q", got, want)
	}
	if got, want := tail(p, 3), `\xa6x`; got != want { // a rune cut in half
		t.Errorf("tail of 3 bytes = %q, want %q", got, want)
	}
}

// TestStopUnitReadsHowAFailedUnitEnded: a failed mount unit's Result is read before the unit is
// stopped and reset, once, and HowItEnded reports an OOM kill from it (a real user manager on
// this machine's cgroup v1 cannot produce one: tests/systemdmounter shows the read of a real
// "signal" result).
func TestStopUnitReadsHowAFailedUnitEnded(t *testing.T) {
	c := &fakeConn{connected: true, jobResult: "done", activeState: "failed", result: "oom-kill"}
	dial, _ := dialer(c)
	m := newMounter(Config{StateDir: t.TempDir()}, dial)
	target := "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"
	unit := MountUnitName(target)
	start := time.Now()
	if err := m.stopUnit(context.Background(), unit); err != nil {
		t.Fatal(err)
	}
	want := []string{"list " + unit, "get " + unit + " Result", "stop " + unit, "reset " + unit}
	if !slices.Equal(c.calls, want) {
		t.Errorf("calls = %v, want %v", c.calls, want)
	}
	end := m.HowItEnded(context.Background(), target, start)
	if !end.OOMKilled || !strings.Contains(end.Detail, "(unit "+unit+") was OOM-killed at no MemoryMax") {
		t.Errorf("HowItEnded = %+v, want an OOM kill", end)
	}
	if end := m.HowItEnded(context.Background(), target, start); end.OOMKilled {
		t.Errorf("the same ending reported twice: %+v", end)
	}
	// A result read long before the mount died is not this death's.
	if err := m.stopUnit(context.Background(), unit); err != nil {
		t.Fatal(err)
	}
	if end := m.HowItEnded(context.Background(), target, time.Now().Add(2*time.Minute)); end.OOMKilled {
		t.Errorf("an old ending reported: %+v", end)
	}
	// Any other result, or a unit that did not fail, is no OOM kill; a running unit's Result is not read.
	c.result = "signal"
	_ = m.stopUnit(context.Background(), unit)
	if end := m.HowItEnded(context.Background(), target, start); end.OOMKilled {
		t.Errorf("a killed unit reported OOM-killed: %+v", end)
	}
	c.activeState, c.calls = "active", nil
	_ = m.stopUnit(context.Background(), unit)
	if slices.Contains(c.calls, "get "+unit+" Result") {
		t.Errorf("the Result of a running unit was read: %v", c.calls)
	}
}

func TestMajorVersion(t *testing.T) {
	for v, want := range map[string]int{"252.38-1~deb12u1": 252, "239": 239, "245.4-4ubuntu3.24": 245, "": 0, "v252": 0} {
		if got := majorVersion(v); got != want {
			t.Errorf("majorVersion(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestHandoverArgs(t *testing.T) {
	args := []string{"--allow-root", "--auto-unmount", "--cache=/s/cache", "--read-only", "--uid=1000"}
	if got, want := handoverArgs(args), []string{"--allow-root", "--cache=/s/cache", "--uid=1000"}; !slices.Equal(got, want) {
		t.Errorf("handoverArgs = %v, want %v (mount-s3 refuses --read-only and --auto-unmount with /dev/fd/N)", got, want)
	}
	if len(args) != 5 {
		t.Errorf("handoverArgs changed its argument: %v", args)
	}
	m := &Mounter{cfg: Config{FuseHelperPath: "/h"}}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"/h", "mount", "/st"}},
		{[]string{"--read-only", "--allow-other"}, []string{"/h", "mount", "--read-only", "--allow-other", "/st"}},
		{[]string{"--allow-root"}, []string{"/h", "mount", "--allow-other", "/st"}},
	} {
		if got := m.helperCommand(c.args, "/st"); !slices.Equal(got, c.want) {
			t.Errorf("helperCommand(%v) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestWritablePathsAndInManager(t *testing.T) {
	args := []string{"--allow-root", "--cache=/var/cache/s3.csi.scality.com/abc", "--cache=relative", "--max-cache-size=512", "--uid=1000"}
	if got, want := writablePaths(args), []string{"/var/cache/s3.csi.scality.com/abc"}; !slices.Equal(got, want) {
		t.Errorf("writablePaths = %v, want %v (only the driver's absolute cache directory)", got, want)
	}
	if got := writablePaths([]string{"--allow-root"}); got != nil {
		t.Errorf("writablePaths without a cache = %v, want none", got)
	}
	cmd := []string{"/h", "bind", "--read-only", "/s", "/t"}
	if got, want := inManager(cmd, true), []string{"/h", "bind", "--in-manager-namespace", "--read-only", "/s", "/t"}; !slices.Equal(got, want) {
		t.Errorf("inManager = %v, want %v", got, want)
	}
	if got := inManager(cmd, false); !slices.Equal(got, cmd) {
		t.Errorf("inManager without protection = %v, want %v", got, cmd)
	}
}
