package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// dbusConn is the part of go-systemd's *dbus.Conn this package uses.
type dbusConn interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sd.Property, ch chan<- string) (int, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	ListUnitsByPatternsContext(ctx context.Context, states, patterns []string) ([]sd.UnitStatus, error)
	SystemStateContext(ctx context.Context) (*sd.Property, error)
	SetPropertiesSubscriber(updateCh chan<- *sd.PropertiesUpdate, errCh chan<- error)
	KillUnitContext(ctx context.Context, name string, signal int32)
	GetServicePropertyContext(ctx context.Context, service, propertyName string) (*sd.Property, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, properties ...sd.Property) error
	GetManagerProperty(prop string) (string, error)
	Connected() bool
	Close()
}

var _ dbusConn = (*sd.Conn)(nil)

// dialFunc opens a new connection to systemd.
type dialFunc func() (dbusConn, error)

// dialPrivate returns a dialFunc for systemd's private socket.
func dialPrivate(socket string) dialFunc {
	return func() (dbusConn, error) { return Connect(socket) }
}

// Connect opens a connection to systemd's private socket (peer-to-peer D-Bus, no bus daemon,
// no Hello), authenticating with EXTERNAL as the current uid. The Mounter manages its own
// connections; this is for tools and benchmarks that talk to the same manager.
//
// go-systemd asks for two connections (one for calls, one for signals); both get the same
// socket. systemd sends every signal of every unit to each of its private connections,
// whatever the client asked for, and each connection decodes all it receives: with a second
// socket every signal was decoded twice. On a node with many mounts that is most of the node
// plugin's allocation (systemd re-announces a stacked mount's unit at each mount table change).
func Connect(socket string) (*sd.Conn, error) {
	var shared *dbus.Conn
	c, err := sd.NewConnection(func() (*dbus.Conn, error) {
		if shared != nil {
			return shared, nil
		}
		conn, err := dbus.Dial("unix:path=" + socket)
		if err != nil {
			return nil, err
		}
		if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			conn.Close()
			return nil, err
		}
		shared = conn
		return conn, nil
	})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd at %s: %w", socket, err)
	}
	return c, nil
}

// errConnLost reports that the D-Bus connection dropped while a job was being waited for.
var errConnLost = errors.New("connection to systemd lost while waiting for a job")

// Bounds of the D-Bus traffic with systemd (bus defaults).
const (
	// defaultDialTimeout bounds one connection attempt (connect, authentication).
	defaultDialTimeout = 5 * time.Second
	// defaultCallTimeout bounds one D-Bus method call (not the wait for a job's end).
	defaultCallTimeout = 30 * time.Second
	// Redial backoff after a failed attempt: callers get the last error at once meanwhile.
	dialBackoffMin = 100 * time.Millisecond
	dialBackoffMax = 5 * time.Second
)

// bus holds the current D-Bus connection and replaces it transparently when it drops (systemd
// restarted or re-executed, socket closed). Connections are dialled lazily, so a plugin starts
// even while systemd is unreachable and recovers on the next call.
//
// A stuck systemd must not stall the node: one dial runs at a time, in its own goroutine,
// bounded by dialTimeout, and no lock is held while it runs (callers wait for it only until
// their own context ends); after a failed dial, callers get that error at once until a backoff
// (100 ms doubling to 5 s) has passed; each method call is bounded by callTimeout. Every such
// failure is mounter.ErrUnavailable.
type bus struct {
	dial        dialFunc
	dialTimeout time.Duration // default defaultDialTimeout
	callTimeout time.Duration // default defaultCallTimeout
	// onConnect, when set, runs with every new connection and a channel closed when that
	// connection is replaced or closed.
	onConnect func(c dbusConn, gone <-chan struct{})

	mu      sync.Mutex
	conn    dbusConn
	gone    chan struct{}
	dialing chan struct{} // closed when the dial in progress ends; nil when none runs
	lastErr error         // the last dial's failure
	retryAt time.Time     // no new dial before this
	backoff time.Duration
}

// get returns a live connection, dialling a new one when there is none or the old one dropped.
func (b *bus) get(ctx context.Context) (dbusConn, error) {
	for {
		b.mu.Lock()
		if b.conn != nil && b.conn.Connected() {
			c := b.conn
			b.mu.Unlock()
			return c, nil
		}
		if b.dialing == nil {
			if wait := time.Until(b.retryAt); wait > 0 && b.lastErr != nil {
				err := b.lastErr
				b.mu.Unlock()
				return nil, fmt.Errorf("%w: systemd: %v (next attempt in %s)", mounter.ErrUnavailable, err, wait.Round(time.Millisecond))
			}
			b.dropLocked()
			b.dialing = make(chan struct{})
			go b.dialOnce(b.dialing)
		}
		dialing := b.dialing
		b.mu.Unlock()
		select {
		case <-dialing:
			// Loop: the connection is there, or the failure is in lastErr.
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: systemd: still connecting: %w", mounter.ErrUnavailable, ctx.Err())
		}
	}
}

// dialOnce makes one connection attempt, bounded by dialTimeout, and records its outcome. A
// dial that answers after the timeout is closed.
func (b *bus) dialOnce(done chan struct{}) {
	type result struct {
		c   dbusConn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := b.dial()
		res <- result{c, err}
	}()
	timeout := b.dialTimeout
	if timeout <= 0 {
		timeout = defaultDialTimeout
	}
	var r result
	t := time.NewTimer(timeout)
	select {
	case r = <-res:
		t.Stop()
	case <-t.C:
		r.err = fmt.Errorf("no answer within %s", timeout)
		go func() {
			if late := <-res; late.c != nil {
				late.c.Close()
			}
		}()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.err != nil {
		b.lastErr = r.err
		b.backoff = min(max(2*b.backoff, dialBackoffMin), dialBackoffMax)
		b.retryAt = time.Now().Add(b.backoff)
	} else {
		b.conn, b.gone = r.c, make(chan struct{})
		b.lastErr, b.backoff, b.retryAt = nil, 0, time.Time{}
		if b.onConnect != nil {
			b.onConnect(r.c, b.gone)
		}
	}
	b.dialing = nil
	close(done)
}

// watchConnections makes f run with every new connection from now on, and at once with the
// current one when there is a live one (so a watch set up after the first calls misses
// nothing).
func (b *bus) watchConnections(f func(c dbusConn, gone <-chan struct{})) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onConnect = f
	if b.conn != nil && b.conn.Connected() {
		f(b.conn, b.gone)
	}
}

// dropLocked closes the current connection, if any.
func (b *bus) dropLocked() {
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
		close(b.gone)
	}
}

// do runs call with a live connection and a context bounded by callTimeout. If the call fails
// because the connection dropped underneath it, it runs once more on a fresh connection. Only
// idempotent calls may use do. A call that systemd does not answer in time is ErrUnavailable.
func (b *bus) do(ctx context.Context, call func(context.Context, dbusConn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := b.get(ctx)
		if err != nil {
			return err
		}
		err = b.bounded(ctx, func(cctx context.Context) error { return call(cctx, c) })
		if err == nil || c.Connected() || attempt > 0 {
			return err
		}
	}
}

// bounded runs call with ctx bounded by callTimeout; a call cut by that bound (not by ctx
// itself) is ErrUnavailable.
func (b *bus) bounded(ctx context.Context, call func(context.Context) error) error {
	timeout := b.callTimeout
	if timeout <= 0 {
		timeout = defaultCallTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := call(cctx)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return fmt.Errorf("%w: systemd did not answer within %s: %v", mounter.ErrUnavailable, timeout, err)
	}
	return err
}

// close drops the current connection.
func (b *bus) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked()
}

// waitJob waits for a job started on c to finish and returns its result ("done", "failed",
// "timeout", "canceled", "dependency", "skipped"). It gives up when ctx ends or c drops (a
// dropped connection never delivers the JobRemoved signal).
func waitJob(ctx context.Context, c dbusConn, ch <-chan string) (string, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case res := <-ch:
			return res, nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
			if !c.Connected() {
				return "", errConnLost
			}
		}
	}
}

// isNoSuchUnit reports whether err is systemd's "unit not loaded" error.
func isNoSuchUnit(err error) bool {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name == "org.freedesktop.systemd1.NoSuchUnit"
	}
	var pe *dbus.Error
	return errors.As(err, &pe) && pe.Name == "org.freedesktop.systemd1.NoSuchUnit"
}
