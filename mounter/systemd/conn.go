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
	SetSubStateSubscriber(updateCh chan<- *sd.SubStateUpdate, errCh chan<- error)
	KillUnitContext(ctx context.Context, name string, signal int32)
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
func Connect(socket string) (*sd.Conn, error) {
	c, err := sd.NewConnection(func() (*dbus.Conn, error) {
		conn, err := dbus.Dial("unix:path=" + socket)
		if err != nil {
			return nil, err
		}
		if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd at %s: %w", socket, err)
	}
	return c, nil
}

// errConnLost reports that the D-Bus connection dropped while a job was being waited for.
var errConnLost = errors.New("connection to systemd lost while waiting for a job")

// bus holds the current D-Bus connection and replaces it transparently when it drops (systemd
// restarted or re-executed, socket closed). Connections are dialled lazily, so a plugin starts
// even while systemd is unreachable and recovers on the next call.
type bus struct {
	dial dialFunc
	// onConnect, when set, runs with every new connection and a channel closed when that
	// connection is replaced or closed.
	onConnect func(c dbusConn, gone <-chan struct{})

	mu   sync.Mutex
	conn dbusConn
	gone chan struct{}
}

// get returns a live connection, dialling a new one when there is none or the old one dropped.
func (b *bus) get() (dbusConn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil && b.conn.Connected() {
		return b.conn, nil
	}
	b.dropLocked()
	c, err := b.dial()
	if err != nil {
		return nil, fmt.Errorf("%w: systemd: %v", mounter.ErrUnavailable, err)
	}
	b.conn, b.gone = c, make(chan struct{})
	if b.onConnect != nil {
		b.onConnect(c, b.gone)
	}
	return c, nil
}

// dropLocked closes the current connection, if any.
func (b *bus) dropLocked() {
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
		close(b.gone)
	}
}

// do runs call with a live connection. If the call fails because the connection dropped
// underneath it, it runs once more on a fresh connection. Only idempotent calls may use do.
func (b *bus) do(call func(dbusConn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := b.get()
		if err != nil {
			return err
		}
		err = call(c)
		if err == nil || c.Connected() || attempt > 0 {
			return err
		}
	}
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
