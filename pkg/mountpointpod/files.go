package mountpointpod

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
)

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeFileAtomic replaces path with data (mode 0644) through a temporary file in the same
// directory and a rename, so a reader never sees a partial file.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped bool
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
		t.dropped = true
	}
	return len(p), nil
}

// String returns the kept bytes; when earlier output was dropped, the first partial line is
// replaced by a marker.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if !t.dropped {
		return string(b)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return "[earlier output dropped]\n" + string(b)
}

// teeTail copies mount-s3's stderr to the container output and to the tail. It never fails:
// a broken container output must not make mount-s3 die of SIGPIPE on its next log line.
type teeTail struct {
	w    io.Writer
	tail *tail
}

func (t teeTail) Write(p []byte) (int, error) {
	_, _ = t.tail.Write(p)
	_, _ = t.w.Write(p)
	return len(p), nil
}

// ignoreErrors is a writer that never fails, for the same reason as teeTail.
type ignoreErrors struct{ w io.Writer }

func (i ignoreErrors) Write(p []byte) (int, error) {
	_, _ = i.w.Write(p)
	return len(p), nil
}

// childOutput is how w is given to mount-s3: a file directly, anything else through a
// writer that never fails.
func childOutput(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return ignoreErrors{w}
}
