// Package mounthealth tells whether the mount-s3 mount at a path is served, without ever
// blocking on a daemon that does not answer.
//
// A mount is Live when the kernel's mount table shows a mount-s3 FUSE mount at the path and a
// call that reaches the daemon (statfs: the kernel never answers it from a cache) returns within
// a deadline; Dead on ENOTCONN, EIO, ECONNABORTED or ENODEV (the daemon is gone or the connection
// was aborted) or when the deadline passes; Absent when nothing is mounted at the path; Foreign
// when something else is. Attribute caches never decide: a stat of the mount root can succeed
// from the kernel's cache long after the daemon died.
//
// The mount table is read first and the path touched only when it holds a mount-s3 mount; the
// probe runs in its own goroutine, so a caller waits at most the deadline; checks of one path at
// the same time share one probe. A probe stuck in an unresponsive daemon stays blocked until the
// mount is aborted (a forced unmount); once it is older than the deadline, further checks of the
// same path report Dead at once instead of piling up blocked probes.
package mounthealth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// State is what a path holds.
type State int

const (
	// Absent means nothing is mounted at the path (it may not exist).
	Absent State = iota
	// Live is a mount-s3 mount whose daemon answered in time.
	Live
	// Dead is a mount-s3 mount whose daemon is gone or did not answer in time.
	Dead
	// Foreign is a mount of another filesystem at the path.
	Foreign
)

func (s State) String() string {
	return [...]string{"absent", "live", "dead", "foreign"}[s]
}

// Result is one check's outcome.
type Result struct {
	State State
	// Entry is the top-most mount at the path that is not an earlier release's guard (nil when
	// Absent).
	Entry *mounttable.Entry
	// Cause says why a mount is Dead (nil otherwise).
	Cause error
	// Guarded is true when the guard of a release before ADR 0008 (mounttable.IsGuard) is
	// mounted at the path.
	Guarded bool
	// Ours lists, top first, the mounts at the path the driver may remove: mount-s3 mounts (and
	// binds of them) and earlier releases' guards, down to the first mount of something else.
	Ours []mounttable.Entry
	// Unprobed is true when State is Live from the mount table alone (Classify): a mount-s3
	// mount is on top, and its daemon was not asked. A dead daemon's mount stays in the table
	// until it is unmounted, so such a Live says nothing about the daemon.
	Unprobed bool
}

// DefaultTimeout is how long a daemon has to answer when Checker.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Checker checks mounts. The zero value reads /proc/self/mountinfo and uses DefaultTimeout; it
// is safe for concurrent use.
type Checker struct {
	// Table is where mounts are looked up.
	Table mounttable.Table
	// Timeout bounds how long the daemon has to answer.
	Timeout time.Duration
	// Statfs replaces the probe (tests).
	Statfs func(path string) error

	mu      sync.Mutex
	pending map[string]*probeCall // paths whose statfs has not returned
}

// Check reports what path holds. It returns an error only when the mount table cannot be read.
// The table is read only when the kernel cannot say what is mounted at path itself
// (mounttable.Table.At, Linux 6.13; before that, a path it says is no mount point,
// mounttable.Table.Mounted, is Absent without a read).
func (c *Checker) Check(ctx context.Context, path string) (Result, error) {
	if r, known := c.fromKernel(ctx, path); known {
		return r, nil
	}
	if mounted, known := c.Table.Mounted(path); known && !mounted {
		return Result{State: Absent}, nil
	}
	entries, err := c.Table.List()
	if err != nil {
		return Result{}, err
	}
	var stack []mounttable.Entry // bottom to top
	for _, e := range entries {
		if e.MountPoint == path {
			stack = append(stack, e)
		}
	}
	return c.result(ctx, path, stack), nil
}

// fromKernel is Check from what the kernel says of path alone (mounttable.Table.At), without
// the table; known is false where the kernel cannot say.
func (c *Checker) fromKernel(ctx context.Context, path string) (r Result, known bool) {
	stack, known := c.Table.At(path)
	if !known {
		return Result{}, false
	}
	return c.result(ctx, path, stack), true
}

// Snapshot is the mount table as read once, by mount point (each list bottom to top), so that
// checking many paths reads and parses the table once instead of once per path.
type Snapshot map[string][]mounttable.Entry

// Snapshot reads the mount table.
func (c *Checker) Snapshot() (Snapshot, error) {
	entries, err := c.Table.List()
	if err != nil {
		return nil, err
	}
	s := make(Snapshot, len(entries))
	for _, e := range entries {
		s[e.MountPoint] = append(s[e.MountPoint], e)
	}
	return s, nil
}

// CheckIn is Check against a snapshot: the table is not read again, the daemon is probed as in
// Check. The table part is as old as the snapshot: a path mounted or unmounted since shows as it
// was, so a caller that acts on Absent or Foreign checks again with Check.
func (c *Checker) CheckIn(ctx context.Context, path string, s Snapshot) Result {
	return c.result(ctx, path, s[path])
}

// Lookup answers, for one operation, what is mounted at the paths it touches: each path from the
// kernel on its own where it can say (mounttable.Table.At), else every path from one read of
// the table, made at the first question and kept. Answers from that read are as old as it is
// (see CheckIn). Not safe for concurrent use.
type Lookup struct {
	c    *Checker
	snap Snapshot
}

// Lookup starts a Lookup; it reads nothing yet.
func (c *Checker) Lookup() *Lookup { return &Lookup{c: c} }

// Check is Checker.Check through the lookup. It returns an error only when the table had to be
// read and could not be.
func (l *Lookup) Check(ctx context.Context, path string) (Result, error) {
	if l.snap == nil {
		if r, known := l.c.fromKernel(ctx, path); known {
			return r, nil
		}
		snap, err := l.c.Snapshot()
		if err != nil {
			return Result{}, err
		}
		l.snap = snap
	}
	return l.c.CheckIn(ctx, path, l.snap), nil
}

// Classify is CheckIn without the probe: a mount-s3 mount on top is reported Live with
// Unprobed set. Probe it (Probe, once per ProbeKey) to know whether its daemon serves it.
func (c *Checker) Classify(path string, s Snapshot) Result {
	r := classify(s[path])
	r.Unprobed = r.State == Live
	return r
}

// ProbeKey identifies the FUSE connection behind a Live or Dead result's mount (the mount's
// device number): paths with the same key are served by one daemon (a mount and its bind
// mounts), so one Probe answers for all of them.
func ProbeKey(r Result) string {
	if r.Entry == nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", r.Entry.Major, r.Entry.Minor)
}

// Probe asks the daemon behind the mount-s3 mount at path to answer, as Check does, and
// returns nil when it did, else why the mount counts as dead: ErrNotFUSE when no FUSE mount is
// at path any more (look it up again), ErrNoAnswer, or the error of a dead connection.
func (c *Checker) Probe(ctx context.Context, path string) error { return c.probe(ctx, path) }

// result classifies the mounts stacked at path (bottom to top) and probes the top one.
func (c *Checker) result(ctx context.Context, path string, stack []mounttable.Entry) Result {
	r := classify(stack)
	if r.State == Live {
		if r.Cause = c.probe(ctx, path); r.Cause != nil {
			r.State = Dead
		}
	}
	return r
}

// classify reads the mounts stacked at a path (bottom to top); a mount-s3 mount on top is Live.
func classify(stack []mounttable.Entry) Result {
	var r Result
	for i := len(stack) - 1; i >= 0; i-- {
		e := stack[i]
		if mounttable.IsGuard(&e) {
			r.Guarded = true
		} else if r.Entry == nil {
			r.Entry = &e
		}
		if ours := mounttable.IsGuard(&e) || mounttable.IsMountS3(&e); ours && len(r.Ours) == len(stack)-1-i {
			r.Ours = append(r.Ours, e)
		}
	}
	switch {
	case r.Entry == nil:
		r.State = Absent // nothing, or only the guard
	case !mounttable.IsMountS3(r.Entry):
		r.State = Foreign
	default:
		r.State = Live
	}
	return r
}

// ErrNoAnswer is the cause of a Dead mount whose daemon did not answer in time.
var ErrNoAnswer = errors.New("mount-s3 did not answer")

// probeCall is one statfs of a path in flight; err is set before done is closed.
type probeCall struct {
	since time.Time
	done  chan struct{}
	err   error
}

// probe returns nil when the daemon behind path answers, else why it is considered dead. Checks
// of one path at the same time share one statfs: a caller that finds one in flight waits for its
// answer (within its own deadline), unless it has been in flight longer than the deadline: the
// daemon is stuck, the caller gets Dead at once instead of another blocked statfs.
func (c *Checker) probe(ctx context.Context, path string) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c.mu.Lock()
	call, ok := c.pending[path]
	if ok && time.Since(call.since) >= timeout {
		c.mu.Unlock()
		return fmt.Errorf("%w: a check started %v ago has not returned", ErrNoAnswer, time.Since(call.since).Round(time.Second))
	}
	if !ok {
		if c.pending == nil {
			c.pending = map[string]*probeCall{}
		}
		call = &probeCall{since: time.Now(), done: make(chan struct{})}
		c.pending[path] = call
		statfs := c.Statfs
		if statfs == nil {
			statfs = statfsFUSE
		}
		go func() {
			err := statfs(path)
			c.mu.Lock()
			delete(c.pending, path)
			call.err = err
			c.mu.Unlock()
			close(call.done)
		}()
	}
	c.mu.Unlock()
	timer := time.NewTimer(timeout - time.Since(call.since))
	defer timer.Stop()
	select {
	case <-call.done:
		if isDead(call.err) || errors.Is(call.err, ErrNotFUSE) {
			return call.err
		}
		return nil // an answer, even an error such as ENOSYS, means a daemon serves the mount
	case <-timer.C:
		return fmt.Errorf("%w within %v", ErrNoAnswer, timeout)
	case <-ctx.Done():
		return fmt.Errorf("%w before the request's deadline: %v", ErrNoAnswer, ctx.Err())
	}
}

// ErrNotFUSE is the cause when a probe reached a filesystem other than FUSE at the path: the
// mount the table showed there is gone (unmounted since the table was read), and the statfs
// was answered by what lies under it.
var ErrNotFUSE = errors.New("no FUSE filesystem at the path any more")

// fuseSuperMagic is FUSE's filesystem type in statfs(2) (linux/magic.h), for every FUSE mount
// and bind of one.
const fuseSuperMagic = 0x65735546

// statfsFUSE is the probe: a statfs that reaches the daemon, and ErrNotFUSE when the answer
// came from another filesystem.
func statfsFUSE(path string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return err
	}
	if uint64(st.Type) != fuseSuperMagic { //nolint:gosec // G115: a magic number, compared bit for bit
		return fmt.Errorf("%w (filesystem type %#x)", ErrNotFUSE, uint64(st.Type)) //nolint:gosec // as above
	}
	return nil
}

// isDead reports whether a probe error means no daemon serves the mount.
func isDead(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENODEV)
}
