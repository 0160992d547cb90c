package pod

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileWatch reports, through appeared, the content of a file once it is created (or renamed)
// in a directory. It uses inotify: no polling.
type fileWatch struct {
	fd       int // inotify
	stop     int // eventfd written by Close
	appeared chan string
}

// watchFile starts watching dir for name. A file that already exists is reported at once.
func watchFile(dir, name string) (*fileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	w := &fileWatch{fd: fd, stop: stop, appeared: make(chan string, 1)}
	path := filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil {
		w.appeared <- string(b)
	}
	go w.run(path, name)
	return w, nil
}

func (w *fileWatch) run(path, name string) {
	defer unix.Close(w.fd)
	defer unix.Close(w.stop)
	buf := make([]byte, 4096)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.stop), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if string(bytes.TrimRight(nameBytes, "\x00")) != name {
				continue
			}
			if b, err := os.ReadFile(path); err == nil {
				select {
				case w.appeared <- string(b):
				default:
				}
			}
		}
	}
}

// Close stops watching. Call it once.
func (w *fileWatch) Close() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(w.stop, one[:])
}
