package mountoptions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// dial makes one connection attempt. The receiver's directory is writable by a less trusted
// party (the Mountpoint Pod), so the socket is opened (O_PATH) without following a link at
// either the directory or the socket name, checked to be a socket, and dialled through
// /proc/self/fd/<n>: what is dialled is the socket that was checked, and any path length fits
// the address.
func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	dir, name := filepath.Dir(path), filepath.Base(path) // Dir: a trailing slash would follow a link
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the directory of %s: %w", path, err)
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("connect to %s: %w (file type %o)", path, ErrNotSocket, st.Mode&unix.S_IFMT)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return nil, fmt.Errorf("connect to %s: %w", path, errno)
		}
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	return c.(*net.UnixConn), nil
}
