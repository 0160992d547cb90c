package main

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// upload is the state of one new object being written sequentially into memory; it is sent
// with a single PutObject when the writer flushes (same process, non-empty), fsyncs or
// releases the handle.
type upload struct {
	buf     []byte
	owner   int  // thread-group id of the opener, for the flush rule
	done    bool // completed (or abandoned); no more writes
	aborted bool // an out-of-order write happened: nothing will be uploaded
	errno   syscall.Errno
}

// handle is an open file: a write handle when up != nil, otherwise a read handle with a
// small read-ahead buffer (buf holds the bytes at offset bufOff).
type handle struct {
	n      *fileNode
	up     *upload
	mu     sync.Mutex
	bufOff int64
	buf    []byte
}

const readAhead = 1 << 20

// Read serves ranged GetObject requests, fetching up to readAhead bytes when reads are
// sequential. Reading a write handle is EBADF.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.up != nil {
		return nil, syscall.EBADF
	}
	f := h.n.fsys
	f.mu.Lock()
	size := h.n.size
	f.mu.Unlock()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	want := min(int64(len(dest)), size-off)
	h.mu.Lock()
	defer h.mu.Unlock()
	if off >= h.bufOff && off+want <= h.bufOff+int64(len(h.buf)) {
		return fuse.ReadResultData(h.buf[off-h.bufOff : off-h.bufOff+want]), 0
	}
	chunk := want
	if off == h.bufOff+int64(len(h.buf)) {
		chunk = min(max(want, readAhead), size-off)
	}
	sctx, cancel := s3ctx()
	defer cancel()
	data, err := f.st.get(sctx, h.n.key, off, chunk)
	if err != nil {
		return nil, f.ioErr("GetObject", h.n.key, err)
	}
	h.buf, h.bufOff = data, off
	return fuse.ReadResultData(data[:min(want, int64(len(data)))]), 0
}

// Write appends data; a write anywhere but the current end aborts the upload with EINVAL.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.up == nil {
		return 0, syscall.EPERM
	}
	f := h.n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case h.up.aborted || h.up.done:
		return 0, syscall.EINVAL
	case off != int64(len(h.up.buf)):
		f.log.printf("out of order write to %q: expected offset %d but got %d, aborting the upload", h.n.key, len(h.up.buf), off)
		h.up.aborted = true
		return 0, syscall.EINVAL
	}
	h.up.buf = append(h.up.buf, data...)
	h.n.size, h.n.mtime = int64(len(h.up.buf)), time.Now()
	return uint32(len(data)), 0
}

// Flush completes the upload when the opening process closes a non-empty file; otherwise
// (empty file, other process) the upload completes on release.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if h.up == nil {
		return 0
	}
	f := h.n.fsys
	f.mu.Lock()
	now := !h.up.done && !h.up.aborted && len(h.up.buf) > 0 && tgid(ctx) == h.up.owner
	f.mu.Unlock()
	if now {
		return h.finish()
	}
	return 0
}

// Fsync completes the upload; later writes fail.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if h.up == nil {
		return 0
	}
	return h.finish()
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.up != nil {
		// close(2) does not return Release's result; a failed upload was already reported
		// by flush (and is in the stand-in's log).
		_ = h.finish()
	}
	return 0
}

// finish uploads the buffered object once (PutObject) and ends the write state of the key.
// Later calls return the first result.
func (h *handle) finish() syscall.Errno {
	f, n, up := h.n.fsys, h.n, h.up
	f.mu.Lock()
	if up.done {
		defer f.mu.Unlock()
		return up.errno
	}
	up.done = true
	body := up.buf
	up.buf = nil
	f.mu.Unlock()
	var err error
	if !up.aborted {
		sctx, cancel := s3ctx()
		err = f.st.put(sctx, n.key, body)
		cancel()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writing[n.key] == n {
		delete(f.writing, n.key)
	}
	if n.up == up {
		n.up = nil
	}
	switch {
	case up.aborted:
		up.errno = syscall.EINVAL
	case err != nil:
		up.errno = f.ioErr("PutObject", n.key, err)
	default:
		n.size, n.mtime = int64(len(body)), time.Now()
		for p := range f.localDirs {
			if strings.HasPrefix(n.key, p) {
				delete(f.localDirs, p) // now implied by the object
			}
		}
		f.log.debugf("uploaded %q (%d bytes)", n.key, len(body))
	}
	return up.errno
}
