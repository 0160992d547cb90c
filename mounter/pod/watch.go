package pod

import (
	"errors"
	"io/fs"
	"strings"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/filewatch"
	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// fileWatch reports, through appeared, the content of a file once it is created (or renamed)
// in a directory (pkg/filewatch: no polling).
type fileWatch struct {
	dir      *confined.Dir
	watch    *filewatch.Watch
	appeared chan string
	stop     chan struct{}
	done     chan struct{}
}

// watchFile starts watching dir for name. A file that already exists is reported at once.
// The directory is one the Mountpoint Pod can write: the file is read through a confined
// handle (no link followed, a regular file only, at most maxWatchedFile bytes).
func watchFile(dir, name string) (*fileWatch, error) {
	d, err := confined.Open(dir)
	if err != nil {
		return nil, err
	}
	fw, err := filewatch.New(dir, name)
	if err != nil {
		d.Close()
		return nil, err
	}
	w := &fileWatch{dir: d, watch: fw, appeared: make(chan string, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.report(name)
	go w.run(name)
	return w, nil
}

// maxWatchedFile caps what is read of a watched file (mount-s3's error message).
const maxWatchedFile = 16 << 10

// report sends the watched file's content, marked when cut at maxWatchedFile, when there is
// such a regular file and nothing is waiting to be received yet.
func (w *fileWatch) report(name string) {
	b, truncated, err := w.dir.ReadFile(name, maxWatchedFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.InfoS("Ignoring a file the Mountpoint Pod wrote", "dir", w.dir.Name(), "file", name, "err", err)
		}
		return
	}
	text := safetext.Escape(strings.TrimSpace(string(b))) // the Mountpoint Pod wrote it
	if truncated {
		text += " [truncated]"
	}
	select {
	case w.appeared <- text:
	default:
	}
}

func (w *fileWatch) run(name string) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-w.watch.Changed():
			w.report(name)
		}
	}
}

// Close stops watching. Call it once.
func (w *fileWatch) Close() {
	close(w.stop)
	w.watch.Close()
	<-w.done
	w.dir.Close()
}
