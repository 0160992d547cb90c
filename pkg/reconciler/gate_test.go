package reconciler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
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

// TestHeldKeysReleasedAtQuiet: a key reconciled a moment ago waits out its batch window, unless
// the burst ends first: quietAfter after the last workload event, every waiting key is queued.
func TestHeldKeysReleasedAtQuiet(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[Request]())
	defer q.ShutDown()
	r := &Reconciler{cfg: Config{BatchWindow: time.Hour}, gate: newGate(1, 2, 50*time.Millisecond)}
	r.gate.onQuiet = r.releaseHeld
	held, quietKey := podcontract.Key{NodeName: "n1", PVName: "pv1"}, podcontract.Key{NodeName: "n2", PVName: "pv2"}
	r.last = map[podcontract.Key]time.Time{held: time.Now()}

	r.enqueueKey(q, quietKey) // never reconciled: queued at once
	r.enqueueKey(q, held)     // reconciled a moment ago: waits for the window (an hour)
	if n := q.Len(); n != 1 {
		t.Fatalf("queue holds %d keys right after, want 1 (the held key waits)", n)
	}
	if got, _ := q.Get(); got.Key != quietKey {
		t.Fatalf("queued %+v, want %+v", got, quietKey)
	}
	q.Done(Request{Key: quietKey})
	time.Sleep(150 * time.Millisecond)
	if n := q.Len(); n != 0 {
		t.Fatalf("queue holds %d keys with no workload event, want 0: only the end of a burst releases a held key", n)
	}

	r.gate.event()
	time.Sleep(20 * time.Millisecond)
	if n := q.Len(); n != 0 {
		t.Fatalf("queue holds %d keys during the burst, want 0", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if q.Len() == 0 {
		t.Fatal("the held key was not queued within 2 s of the burst's end")
	}
	got, _ := q.Get()
	if got.Key != held {
		t.Fatalf("after the burst queued %+v, want the held key %+v", got, held)
	}
	q.Done(got)
	r.releaseHeld() // released once: nothing more to add
	if n := q.Len(); n != 0 {
		t.Fatalf("a second release queued %d keys, want 0", n)
	}
}
