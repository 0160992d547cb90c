package mountpointpod

import (
	"path/filepath"
	"sync"

	"github.com/s3csi/s3-csi-driver/pkg/filewatch"
)

// fileWatch closes appeared once a file exists in a watched directory (pkg/filewatch: no
// polling); the caller checks for a file that existed before the watch.
type fileWatch struct {
	watch     *filewatch.Watch
	appeared  chan struct{}
	stop      chan struct{}
	closeOnce sync.Once
}

// watchFile starts watching dir for name. Close releases it.
func watchFile(dir, name string) (*fileWatch, error) {
	fw, err := filewatch.New(dir, name)
	if err != nil {
		return nil, err
	}
	w := &fileWatch{watch: fw, appeared: make(chan struct{}), stop: make(chan struct{})}
	path := filepath.Join(dir, name)
	go func() {
		for {
			select {
			case <-w.stop:
				return
			case <-fw.Changed():
				if exists(path) {
					close(w.appeared)
					return
				}
			}
		}
	}()
	return w, nil
}

// Close stops watching; appeared is then never closed. It may be called more than once.
func (w *fileWatch) Close() {
	w.closeOnce.Do(func() {
		close(w.stop)
		w.watch.Close()
	})
}
