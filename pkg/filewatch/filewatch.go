// Package filewatch tells when a file appears in a directory, through fsnotify (inotify on
// Linux): the node plugin waits for a Mountpoint Pod's mount.err and the Mountpoint Pod for the
// node's mount.exit this way, without polling. It only signals; callers read the file
// themselves, with the care its directory calls for (a Mountpoint Pod's comm directory is
// hostile input to the node plugin: pkg/confined).
package filewatch

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// Watch signals each time a file of one name is created, renamed into its directory or
// written. Signals are coalesced: a receiver that was busy sees one signal for several events.
type Watch struct {
	w         *fsnotify.Watcher
	name      string
	changed   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// New starts watching dir for a file named name. A file that already exists is not signalled:
// check for it after New returns, so that nothing falls between the check and the watch. Close
// releases the watch.
func New(dir, name string) (*Watch, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	w := &Watch{w: fw, name: name, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *Watch) run() {
	defer close(w.done)
	for {
		select {
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if filepath.Base(ev.Name) == w.name && ev.Op&(fsnotify.Create|fsnotify.Write) != 0 {
				w.signal()
			}
		case _, ok := <-w.w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: say "maybe" rather than miss the file.
			w.signal()
		}
	}
}

func (w *Watch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed receives a value after the file was (possibly) created or written.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// Close stops watching and waits until no signal can be sent anymore. It may be called more
// than once.
func (w *Watch) Close() {
	w.closeOnce.Do(func() {
		w.w.Close()
		<-w.done
	})
}
