package pod

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/confined"
)

// fileWatch reports, through appeared, the content of a file once it is created (or renamed)
// in a directory. It uses inotify: no polling.
type fileWatch struct {
	dir      *confined.Dir
	fd       int // inotify
	stop     int // eventfd written by Close
	appeared chan string
}

// watchFile starts watching dir for name. A file that already exists is reported at once.
// The directory is one the Mountpoint Pod can write: the file is read through a confined
// handle (no link followed, a regular file only, at most maxWatchedFile bytes).
func watchFile(dir, name string) (*fileWatch, error) {
	d, err := confined.Open(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		d.Close()
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		d.Close()
		unix.Close(fd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	w := &fileWatch{dir: d, fd: fd, stop: stop, appeared: make(chan string, 1)}
	if text, ok := w.read(name); ok {
		w.appeared <- text
	}
	go w.run(name)
	return w, nil
}

// maxWatchedFile caps what is read of a watched file (mount-s3's error message).
const maxWatchedFile = 16 << 10

// read returns the watched file's content, marked when cut at maxWatchedFile; ok is false
// when there is no such regular file.
func (w *fileWatch) read(name string) (string, bool) {
	b, truncated, err := w.dir.ReadFile(name, maxWatchedFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.InfoS("Ignoring a file the Mountpoint Pod wrote", "dir", w.dir.Name(), "file", name, "err", err)
		}
		return "", false
	}
	if truncated {
		return string(b) + " [truncated]", true
	}
	return string(b), true
}

func (w *fileWatch) run(name string) {
	defer w.dir.Close()
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
			if text, ok := w.read(name); ok {
				select {
				case w.appeared <- text:
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
