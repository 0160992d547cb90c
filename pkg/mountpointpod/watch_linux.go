package mountpointpod

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// fileWatch closes appeared once a file exists in a watched directory. It is driven by
// inotify events (no polling); the caller checks for a file that existed before the watch.
type fileWatch struct {
	f         *os.File
	appeared  chan struct{}
	closeOnce sync.Once
}

// watchFile starts watching dir for name. Close releases it.
func watchFile(dir, name string) (*fileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	// Non-blocking, so the runtime poller serves Read and Close interrupts it.
	w := &fileWatch{f: os.NewFile(uintptr(fd), "inotify"), appeared: make(chan struct{})}
	go w.run(filepath.Join(dir, name))
	return w, nil
}

func (w *fileWatch) run(path string) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed
		}
		// Look for the file itself rather than decoding event names: simpler, and correct
		// after a queue overflow too.
		if exists(path) {
			close(w.appeared)
			return
		}
	}
}

// Close stops watching; appeared is then never closed. It may be called more than once.
func (w *fileWatch) Close() {
	w.closeOnce.Do(func() { w.f.Close() })
}
