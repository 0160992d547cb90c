package mountoptions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ReceiveTimeout bounds how long an accepted connection may take to deliver its message (or
// less when Accept's context ends sooner).
const ReceiveTimeout = 10 * time.Second

// SocketMode is the permission of the listening socket: only its owner (the Mountpoint Pod's
// user) may connect, and root (the node plugin), which bypasses file permissions.
const SocketMode fs.FileMode = 0o600

// maxFDsPerRead sizes the control buffer of one read: more descriptors than this in one
// message truncate it (MSG_CTRUNC; the kernel closes those that did not fit) and the message
// is refused with ErrTooManyFDs.
const maxFDsPerRead = 16

// Listener receives Options and descriptors on a Unix socket, one message per connection.
type Listener struct {
	path      string
	ln        *net.UnixListener
	closeOnce sync.Once
}

// Listen creates the Unix socket at path (absolute; at most 107 bytes, else ErrPathTooLong
// naming the limit) with mode SocketMode and listens on it. A stale socket file at path (left
// by a previous process) is replaced; any other kind of file there is an error.
func Listen(path string) (*Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("listen on %s: the socket path must be absolute", path)
	}
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("listen on %s: %w: %d bytes, a Unix socket address holds at most %d", path, ErrPathTooLong, len(path), maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listen on %s: a %s is in the way, not a stale socket", path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: remove the stale socket: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Until this chmod the socket has the umask's mode; only the directory's users (root and
	// the pod's user and group) can reach it in that instant.
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return &Listener{path: path, ln: ln}, nil
}

// Path returns the socket path.
func (l *Listener) Path() string { return l.path }

// Close stops listening and removes the socket file, so later senders get ENOENT. Calling it
// again does nothing and returns nil.
func (l *Listener) Close() error {
	err := error(nil)
	l.closeOnce.Do(func() { err = l.ln.Close() })
	return err
}

// Accept waits for one connection and receives its one message. It must not be called
// concurrently with itself.
//
// The message must be at most MaxMessageSize bytes of JSON with exactly one descriptor, no
// unknown field and valid Options; it must arrive within ReceiveTimeout (or before ctx's
// deadline). Then accept, when not nil, may refuse the options (its error is the reason the
// sender gets) or act on them before the sender is acknowledged. On success the sender gets
// Ack, and the caller gets the options and the descriptor as a file it must close.
//
// Any problem with the connection or its message returns an error wrapping ErrReceive and the
// cause (ErrTooLarge, ErrNoFD, ErrTooManyFDs, ErrMalformed, ErrInvalid, os.ErrDeadlineExceeded,
// accept's error...); the sender gets Nak with the reason when it still listens, every
// descriptor received is closed, and the Listener can Accept again. When ctx ends while
// waiting for a connection, the error wraps ctx.Err(); other errors are the listener's own.
func (l *Listener) Accept(ctx context.Context, accept func(Options, *os.File) error) (Options, *os.File, error) {
	if err := ctx.Err(); err != nil {
		return Options{}, nil, fmt.Errorf("wait for mount options on %s: %w", l.path, err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = l.ln.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	conn, err := l.ln.AcceptUnix()
	if !stop() {
		<-fired
		_ = l.ln.SetDeadline(time.Time{}) // let a later Accept wait again
	}
	if err != nil {
		if ctx.Err() != nil {
			return Options{}, nil, fmt.Errorf("wait for mount options on %s: %w", l.path, ctx.Err())
		}
		return Options{}, nil, fmt.Errorf("accept on %s: %w", l.path, err)
	}
	return receive(ctx, conn, accept)
}

// receive reads, checks and answers the message of one connection, and closes it.
func receive(ctx context.Context, conn *net.UnixConn, accept func(Options, *os.File) error) (Options, *os.File, error) {
	defer conn.Close()
	deadline := time.Now().Add(ReceiveTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	data, oob, err := readMessage(conn)
	if err != nil {
		fds, _ := rights(oob...)
		closeFDs(fds)
		return refuse(conn, err)
	}
	o, fds, err := parse(data, oob...)
	if err != nil {
		closeFDs(fds)
		return refuse(conn, err)
	}
	f := os.NewFile(uintptr(fds[0]), "received-fd")
	if accept != nil {
		if err := accept(o, f); err != nil {
			f.Close()
			return refuse(conn, err)
		}
	}
	if _, err := conn.Write([]byte{Ack}); err != nil {
		f.Close()
		return Options{}, nil, fmt.Errorf("%w: acknowledge: %w", ErrReceive, err)
	}
	return o, f, nil
}

// readMessage reads until end of file, collecting the control buffers. On error it still
// returns the control buffers read so far, so their descriptors can be closed.
func readMessage(conn *net.UnixConn) ([]byte, [][]byte, error) {
	buf := make([]byte, MaxMessageSize+1)
	cbuf := make([]byte, unix.CmsgSpace(4*maxFDsPerRead))
	var oob [][]byte
	n, nfds := 0, 0
	for {
		m, oobn, flags, _, err := conn.ReadMsgUnix(buf[n:], cbuf)
		n += m
		if oobn > 0 {
			oob = append(oob, bytes.Clone(cbuf[:oobn]))
			fds, _ := rights(cbuf[:oobn])
			nfds += len(fds)
		}
		switch {
		case flags&unix.MSG_CTRUNC != 0:
			return nil, oob, fmt.Errorf("%w: more than %d in one message", ErrTooManyFDs, maxFDsPerRead)
		case nfds > 1:
			// Stop at once: a sender spreading descriptors over many small writes must not
			// make this process hold more than a few.
			return nil, oob, fmt.Errorf("%w: got %d", ErrTooManyFDs, nfds)
		case errors.Is(err, io.EOF), err == nil && m == 0 && oobn == 0:
			return buf[:n], oob, nil
		case err != nil:
			return nil, oob, fmt.Errorf("read: %w", err)
		case n > MaxMessageSize:
			return nil, oob, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxMessageSize)
		}
	}
}

// refuse answers Nak with the reason (best effort: the sender may be gone) and returns the
// receive error.
func refuse(conn *net.UnixConn, cause error) (Options, *os.File, error) {
	reason := []byte(cause.Error())
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	_, _ = conn.Write(append([]byte{Nak}, reason...))
	return Options{}, nil, fmt.Errorf("%w: %w", ErrReceive, cause)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
