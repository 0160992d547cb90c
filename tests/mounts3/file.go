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

// handle is an open file: a write handle when up != nil, otherwise a read handle with its
// read-ahead window (buffers.go).
type handle struct {
	n       *fileNode
	up      *upload
	slot    bool // holds one of the mount's write-handle slots (released on release)
	mu      sync.Mutex
	win     *window
	winSize uint64 // size of the last window asked for, which the next one doubles
}

// Read serves ranged GetObject requests through the handle's read-ahead window: a read in the
// window is served from it; a read at or up to 16 MiB past its end moves it on, twice as
// large (up to 2 GiB, within the mount's data-buffer budget); any other read forward starts a
// new 1 MiB + 128 KiB window there, and a read behind the window is fetched on its own (the
// kernel's reads of one file may arrive out of order). Reading a write handle is EBADF.
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
	sctx, cancel := s3ctx()
	defer cancel()
	w := h.win
	switch {
	case w != nil && off >= w.off && off+want <= w.end():
		return fuse.ReadResultData(dest[:copy(dest, w.data[off-w.off:off-w.off+want])]), 0
	case w != nil && off < w.off:
		n, err := f.st.readInto(sctx, h.n.key, off, dest[:want])
		if err != nil {
			return nil, f.ioErr("GetObject", h.n.key, err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	next := uint64(initialWindow)
	if w != nil && off <= w.end()+forwardSeekLimit {
		next = min(2*h.winSize, maxWindow)
	}
	length := max(min(next, uint64(size-off)), uint64(want))
	w.free(f.mem)
	h.win = nil
	nw, err := newWindow(f.mem, length, max(min(initialWindow, length), uint64(want)), off)
	if err != nil {
		return nil, f.ioErr("GetObject", h.n.key, err)
	}
	n, err := f.st.readInto(sctx, h.n.key, off, nw.data)
	if err != nil {
		nw.free(f.mem)
		return nil, f.ioErr("GetObject", h.n.key, err)
	}
	nw.n = n
	h.win, h.winSize = nw, uint64(len(nw.data))
	return fuse.ReadResultData(dest[:copy(dest, nw.data[:min(int64(n), want)])]), 0
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

// Release ends the handle: a read handle's window is freed, a write handle's upload
// completes and its write slot is given back.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	h.win.free(h.n.fsys.mem)
	h.win = nil
	h.mu.Unlock()
	if h.slot {
		h.n.fsys.mu.Lock()
		h.n.fsys.writes--
		h.n.fsys.mu.Unlock()
	}
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
