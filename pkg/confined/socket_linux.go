package confined

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// SocketPath returns a path through which the Unix socket name can be dialled, bound to the
// socket that is there now: /proc/self/fd/<n> of an O_PATH descriptor, so a link or a
// socket swapped in later is not what gets dialled. Call release once the connection is made.
func (d *Dir) SocketPath(name string) (path string, release func(), err error) {
	f, err := d.root.OpenFile(name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return "", nil, fmt.Errorf("%s/%s: %w (a symbolic link, a socket is required)", d.Name(), name, ErrFileType)
		}
		return "", nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return "", nil, err
	}
	if st.Mode().Type() != fs.ModeSocket {
		f.Close()
		return "", nil, fmt.Errorf("%s/%s: %w (a socket is required, found %s)", d.Name(), name, ErrFileType, st.Mode().Type())
	}
	return fmt.Sprintf("/proc/self/fd/%d", f.Fd()), func() { f.Close() }, nil
}
