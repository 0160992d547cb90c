package mountoptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds Send when its context has no deadline.
const DefaultTimeout = 30 * time.Second

// maxSocketPath is the longest path a Unix socket address holds: sun_path is 108 bytes
// including the terminating NUL.
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// Dial retry backoff while the Mountpoint Pod is not listening yet.
const (
	dialBackoffMin = 5 * time.Millisecond
	dialBackoffMax = 100 * time.Millisecond
)

// Send hands o and the open file descriptor fd to the receiver listening at socketPath (an
// absolute path) and returns nil only once the receiver acknowledged them: the receiver then
// holds its own copy of fd; the caller still owns (and should close) its own.
//
// o is validated first (ErrInvalid, ErrTooLarge; a negative fd is ErrNoFD). While the socket
// does not exist or refuses connections (the Mountpoint Pod is starting), Send retries with a
// short backoff until ctx ends. The whole exchange is bounded by ctx's deadline, or by
// DefaultTimeout when ctx has none; an expired or cancelled ctx yields an error wrapping
// ctx.Err(). A refusal yields ErrRejected with the receiver's reason; a connection closed
// without a reply yields ErrNoAck (the receiver may or may not have kept the descriptor, so
// the caller should tear the FUSE mount down and start over).
//
// The socket is reached through /proc/self/fd after checking, without following links, that
// socketPath is a socket (see dial), so any path length works; a link or another kind of file
// at socketPath fails at once with ErrNotSocket.
func Send(ctx context.Context, socketPath string, o Options, fd int) error {
	if err := send(ctx, socketPath, o, fd); err != nil {
		return fmt.Errorf("send mount options to %s: %w", socketPath, err)
	}
	return nil
}

func send(ctx context.Context, socketPath string, o Options, fd int) error {
	if !filepath.IsAbs(socketPath) {
		return errors.New("the socket path must be absolute")
	}
	if fd < 0 {
		return fmt.Errorf("%w: descriptor %d", ErrNoFD, fd)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(data) > MaxMessageSize {
		return fmt.Errorf("%w: %d bytes, at most %d are accepted", ErrTooLarge, len(data), MaxMessageSize)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	conn, err := dialRetry(ctx, socketPath)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := exchange(ctx, conn, data, fd); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection's deadline is ctx's: ctx is done now or within an instant.
			<-ctx.Done()
		}
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return err
	}
	return nil
}

// exchange writes the message with fd, half-closes, and interprets the reply.
func exchange(ctx context.Context, conn *net.UnixConn, data []byte, fd int) error {
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	// Cancellation (not only the deadline) must interrupt blocked I/O.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	oob := unix.UnixRights(fd)
	n, oobn, err := conn.WriteMsgUnix(data, oob, nil)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if oobn != len(oob) {
		return fmt.Errorf("write: the descriptor was not sent (%d of %d control bytes)", oobn, len(oob))
	}
	if n < len(data) {
		// The descriptor travelled with the first bytes; on a stream socket the rest may follow
		// in further writes, the receiver reads until end of file.
		if _, err := conn.Write(data[n:]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if err := conn.CloseWrite(); err != nil {
		return fmt.Errorf("half-close: %w", err)
	}
	reply, err := io.ReadAll(io.LimitReader(conn, 1+MaxReasonLen))
	// A receiver that refuses a message it did not read completely resets the connection
	// after its reply: read what arrived before looking at the error.
	switch {
	case len(reply) == 1 && reply[0] == Ack:
		return nil
	case len(reply) > 0 && reply[0] == Nak:
		return fmt.Errorf("%w: %s", ErrRejected, printable(reply[1:]))
	case len(reply) > 0:
		return fmt.Errorf("%w: unexpected reply %q", ErrNoAck, truncate(string(reply), 32))
	case err != nil:
		return fmt.Errorf("read the reply: %w", err)
	}
	return fmt.Errorf("%w: the connection was closed without a reply", ErrNoAck)
}

// printable makes a reason received from the other side safe to embed in an error message.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// dialRetry connects to path, retrying while it does not exist or refuses connections.
func dialRetry(ctx context.Context, path string) (*net.UnixConn, error) {
	backoff := dialBackoffMin
	var last error // the last "not there yet" answer, the useful one to report
	for {
		conn, err := dial(ctx, path)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil { // the deadline may end the dial itself ("i/o timeout")
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), last)
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		last = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

// ErrNotSocket is wrapped when the socket's name in the receiver's directory is something
// else: a symbolic link (which could lead root's connection to any socket of the host), a
// file, a directory. It is not retried.
var ErrNotSocket = errors.New("not a Unix socket")
