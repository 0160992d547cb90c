//go:build linux

// Package sdnotify sends a file descriptor to systemd's file descriptor store ($NOTIFY_SOCKET,
// sd_notify(3) "FDSTORE=1") and waits until the manager has read it ("BARRIER=1", systemd 246
// and later): a process that exits right after sending could otherwise have its message
// dropped, the manager no longer finding the sender's unit.
package sdnotify

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoSocket is returned when $NOTIFY_SOCKET is not set: not started by systemd, or the unit
// lacks NotifyAccess.
var ErrNoSocket = errors.New("NOTIFY_SOCKET is not set (not started by systemd with NotifyAccess=all?)")

// StoreFD sends fd to the manager listening on socket (a path, or "@name" for an abstract
// socket) as a stored file descriptor named name, then waits up to timeout for the manager to
// have processed the message.
func StoreFD(socket, name string, fd int, timeout time.Duration) error {
	if socket == "" {
		return ErrNoSocket
	}
	if name == "" || strings.ContainsAny(name, ":\n") || len(name) > 255 {
		return fmt.Errorf("bad file descriptor name %q", name)
	}
	addr := &unix.SockaddrUnix{Name: socket}
	if strings.HasPrefix(socket, "@") {
		addr.Name = "\x00" + socket[1:]
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	defer unix.Close(s)
	if err := unix.Sendmsg(s, []byte("FDSTORE=1\nFDNAME="+name), unix.UnixRights(fd), addr, 0); err != nil {
		return fmt.Errorf("send FDSTORE to %s: %w", socket, err)
	}
	// The barrier: the manager closes its copy of the pipe's write end once it has processed
	// every message sent before it; the read end then sees end of file.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("barrier pipe: %w", err)
	}
	defer unix.Close(p[0])
	err = unix.Sendmsg(s, []byte("BARRIER=1"), unix.UnixRights(p[1]), addr, 0)
	unix.Close(p[1])
	if err != nil {
		return fmt.Errorf("send BARRIER to %s: %w", socket, err)
	}
	return waitHangup(p[0], timeout)
}

// waitHangup waits until the pipe read at fd has no writer left.
func waitHangup(fd int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond))
	for errors.Is(err, unix.EINTR) && time.Now().Before(deadline) {
		n, err = unix.Poll(fds, int(time.Until(deadline)/time.Millisecond))
	}
	switch {
	case err != nil:
		return fmt.Errorf("wait for the barrier: %w", err)
	case n == 0:
		return fmt.Errorf("systemd did not process the file descriptor within %s (systemd before 246 has no BARRIER)", timeout)
	}
	return nil
}
