package main

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Read buffers bounded by the memory target (CONFORMANCE.md, rows R3-R5). mount-s3's
// prefetcher reads ahead of a sequential reader in a window that starts at 1 MiB + 128 KiB
// and doubles up to 2 GiB, each growth reserved from the memory limiter: a cursor's first
// reservation is always granted, later ones only within the data-buffer budget
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/prefetch.rs, INITIAL_REQUEST_SIZE,
// PrefetcherConfig; mountpoint-s3-fs/src/memory/limiter.rs, MemoryLimiter::try_reserve). The
// stand-in keeps one window per open file, in memory of its own (mmap, returned at once when
// the window moves on, so the resident size follows the accounting and not the Go heap).

const (
	initialWindow    = 1*mib + 128*1024 // INITIAL_REQUEST_SIZE
	maxWindow        = 2 << 30          // DEFAULT_READ_WINDOW_SIZE
	forwardSeekLimit = 16 * mib         // max_forward_seek_wait_distance
)

// memLimiter accounts the read windows of one mount against the data-buffer budget. Beside
// them it keeps resident a modelled overhead in proportion to the buffers in use: the
// target's reserve (what mount-s3 keeps for metadata and other memory its pool does not
// count) plus modelOverhead, so that at a full budget the stand-in holds target +
// modelOverhead, and an idle one holds none of it. Safe for concurrent use.
type memLimiter struct {
	mu             sync.Mutex
	target, budget uint64
	inUse, peak    uint64
	over           []byte // mmapped, len = reserve + modelOverhead
	touched        int    // bytes of over made resident
}

// newMemLimiter returns the limiter of a mount with memory target t.
func newMemLimiter(t uint64) *memLimiter {
	l := &memLimiter{target: t, budget: budgetFor(t)}
	if b, err := unix.Mmap(-1, 0, int(reserveFor(t)+modelOverhead), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err == nil {
		l.over = b
	}
	return l
}

// take reserves between floor and want bytes and returns how many: as much of want as the
// budget has left, never less than floor (a reader always makes progress, as mount-s3's
// first reservation of a cursor is granted beyond the limit).
func (l *memLimiter) take(want, floor uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := want
	if l.inUse+n > l.budget {
		n = 0
		if l.budget > l.inUse {
			n = l.budget - l.inUse
		}
	}
	n = max(n, min(floor, want))
	l.inUse += n
	l.peak = max(l.peak, l.inUse)
	l.adjust()
	return n
}

// give returns n bytes taken earlier.
func (l *memLimiter) give(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse -= min(n, l.inUse)
	l.adjust()
}

// adjust makes the modelled overhead resident in proportion to the buffers in use. Called
// with mu held.
func (l *memLimiter) adjust() {
	if len(l.over) == 0 || l.budget == 0 {
		return
	}
	page := unix.Getpagesize()
	want := int(float64(len(l.over)) * min(1, float64(l.inUse)/float64(l.budget)))
	want -= want % page
	for ; l.touched < want; l.touched += page {
		l.over[l.touched] = 1
	}
	if want < l.touched {
		_ = unix.Madvise(l.over[want:l.touched], unix.MADV_DONTNEED)
		l.touched = want
	}
}

// usage is what the limiter holds: buffer bytes in use, their peak, and the overhead made
// resident.
func (l *memLimiter) usage() (inUse, peak uint64, overhead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse, l.peak, l.touched
}

// window is the part of an object a read handle holds: data[:n] are the bytes at off.
type window struct {
	data []byte // mmapped; len is what the limiter granted
	off  int64
	n    int
}

// newWindow maps a window of n bytes at off, accounted with l.
func newWindow(l *memLimiter, want, floor uint64, off int64) (*window, error) {
	n := l.take(want, floor)
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		l.give(n)
		return nil, err
	}
	return &window{data: b, off: off}, nil
}

// free unmaps the window and returns its bytes to l.
func (w *window) free(l *memLimiter) {
	if w == nil {
		return
	}
	l.give(uint64(len(w.data)))
	_ = unix.Munmap(w.data)
}

// end is the offset just past the bytes the window holds.
func (w *window) end() int64 { return w.off + int64(w.n) }
