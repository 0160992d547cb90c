package reconciler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestGate: while workload events arrive, at most busy reconciles run; once they have stopped
// for quietAfter, up to drain do, and those waiting start without another release.
func TestGate(t *testing.T) {
	g := newGate(1, 3, 100*time.Millisecond)
	ctx := context.Background()
	g.event()
	if err := g.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var started atomic.Int32
	done := make(chan struct{})
	for range 3 {
		go func() {
			if err := g.acquire(ctx); err == nil {
				started.Add(1)
			}
			done <- struct{}{}
		}()
	}
	time.Sleep(40 * time.Millisecond)
	if n := started.Load(); n != 0 {
		t.Fatalf("%d more reconciles started during the burst, want none (busy bound 1)", n)
	}
	// Quiet now: two more may start (drain bound 3), the third waits for a release.
	deadline := time.After(2 * time.Second)
	for range 2 {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("reconciles did not start once quiet: %d started", started.Load())
		}
	}
	if n := g.running(); n != 3 {
		t.Fatalf("%d running once quiet, want 3", n)
	}
	select {
	case <-done:
		t.Fatal("a fourth reconcile ran past the drain bound")
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a release did not let the waiting reconcile start")
	}
	// A new event makes it busy again: three running, bound 1, nothing more starts.
	g.event()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := g.acquire(cctx); err == nil {
		t.Fatal("a reconcile started during a new burst with three running")
	}
}
