package reconciler

import (
	"context"
	"sync"
	"time"
)

// gate bounds the reconciles running at once: busy of them while workload events keep arriving,
// drain once none has arrived for quietAfter. During a burst the keys wait in the work queue,
// where a key added again before a worker takes it is reconciled once: few workers make one
// write cover many workloads. When the burst ends nothing more is coalesced by waiting, and the
// keys left in the queue are written at full concurrency: each is written once either way.
type gate struct {
	busy, drain int
	quietAfter  time.Duration

	// onQuiet, when set, runs once a burst has ended: quietAfter after its last event.
	onQuiet func()

	mu       sync.Mutex
	inFlight int
	last     time.Time     // the last workload event
	changed  chan struct{} // closed at each release (nil: nobody waits)
	quiet    *time.Timer   // runs onQuiet quietAfter after the last event
}

// quietAfter's default: workload events this far apart end a burst.
const defaultQuietAfter = 250 * time.Millisecond

func newGate(busy, drain int, quietAfter time.Duration) *gate {
	return &gate{busy: max(busy, 1), drain: max(drain, busy, 1), quietAfter: quietAfter}
}

// event notes a workload event.
func (g *gate) event() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = time.Now()
	if g.onQuiet == nil {
		return
	}
	if g.quiet == nil {
		g.quiet = time.AfterFunc(g.quietAfter, g.onQuiet)
		return
	}
	g.quiet.Reset(g.quietAfter)
}

// limitLocked is the bound now, and how long it stays busy (0: it drains).
func (g *gate) limitLocked(now time.Time) (int, time.Duration) {
	if d := g.quietAfter - now.Sub(g.last); d > 0 {
		return g.busy, d
	}
	return g.drain, 0
}

// acquire waits until a reconcile may run (or ctx ends); release must follow.
func (g *gate) acquire(ctx context.Context) error {
	for {
		g.mu.Lock()
		limit, busyFor := g.limitLocked(time.Now())
		if g.inFlight < limit {
			g.inFlight++
			g.mu.Unlock()
			return nil
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		changed := g.changed
		g.mu.Unlock()
		var quiet <-chan time.Time
		var timer *time.Timer
		if busyFor > 0 {
			timer = time.NewTimer(busyFor)
			quiet = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return ctx.Err()
		case <-changed:
		case <-quiet:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// release ends a reconcile acquire let run.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// running is how many reconciles hold the gate.
func (g *gate) running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
}
