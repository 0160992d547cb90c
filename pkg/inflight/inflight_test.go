package inflight

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTryAcquire(t *testing.T) {
	var s Set
	release, ok := s.TryAcquire("a")
	if !ok {
		t.Fatal("first acquire failed")
	}
	if _, ok := s.TryAcquire("a"); ok {
		t.Fatal("second acquire of a busy key succeeded")
	}
	relB, ok := s.TryAcquire("b")
	if !ok {
		t.Fatal("independent key blocked")
	}
	release()
	release() // idempotent
	if _, ok := s.TryAcquire("a"); !ok {
		t.Fatal("key not released")
	}
	relB()
}

func TestConcurrentExclusive(t *testing.T) {
	var s Set
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				if rel, ok := s.TryAcquire("k"); ok {
					n := holders.Add(1)
					if n > maxHolders.Load() {
						maxHolders.Store(n)
					}
					holders.Add(-1)
					rel()
				}
			}
		}()
	}
	wg.Wait()
	if maxHolders.Load() != 1 {
		t.Fatalf("%d holders at once, want 1", maxHolders.Load())
	}
}

// TestForegroundWaitsForBackground: kubelet's call waits for the monitor's work on the same
// key, but is still refused at once by another kubelet call.
func TestForegroundWaitsForBackground(t *testing.T) {
	var s Set
	bg, ok := s.TryAcquireBackground("t")
	if !ok {
		t.Fatal("background acquire failed")
	}
	if _, ok := s.TryAcquire("t"); ok {
		t.Fatal("TryAcquire succeeded on a key held by background work")
	}
	got := make(chan bool, 1)
	go func() {
		rel, ok := s.Acquire(context.Background(), "t")
		if ok {
			rel() // before saying so: the TryAcquire below must find the key free
		}
		got <- ok
	}()
	select {
	case <-got:
		t.Fatal("Acquire did not wait for the background work")
	case <-time.After(50 * time.Millisecond):
	}
	bg()
	if !<-got {
		t.Fatal("Acquire failed after the background work ended")
	}
	fg, ok := s.TryAcquire("t")
	if !ok {
		t.Fatal("TryAcquire failed on a free key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, ok := s.Acquire(ctx, "t"); ok {
		t.Fatal("Acquire succeeded on a key held by another foreground operation")
	}
	if ctx.Err() != nil {
		t.Fatal("Acquire waited for a foreground holder instead of failing at once")
	}
	fg()
	ctx2, cancel2 := context.WithCancel(context.Background())
	bg2, _ := s.TryAcquireBackground("t")
	defer bg2()
	cancel2()
	if _, ok := s.Acquire(ctx2, "t"); ok {
		t.Fatal("Acquire succeeded after its context ended")
	}
}

// TestLockWaits: Lock serialises holders of one key (whichever way they took it), never blocks
// another key, gives up when its context ends, and leaves no state behind.
func TestLockWaits(t *testing.T) {
	var s Set
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := s.Lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			if n := in.Add(1); n > most.Load() {
				most.Store(n)
			}
			time.Sleep(time.Millisecond)
			in.Add(-1)
			release()
		}()
	}
	done := make(chan struct{})
	go func() {
		release, err := s.Lock(context.Background(), "b")
		if err == nil {
			release()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("key b blocked by key a")
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders of key a at once", most.Load())
	}
	// A CSI call holding the key makes Lock wait, until its context ends.
	release, ok := s.TryAcquire("a")
	if !ok {
		t.Fatal("key a not free")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Lock(ctx, "a"); err == nil {
		t.Fatal("Lock took a held key")
	}
	release()
	s.mu.Lock()
	left := len(s.busy)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d keys kept", left)
	}
}

// TestForegroundNeverFailsBecauseOfBackground: background work that releases a key and takes
// it again at once (the mount monitor's checks of one target in a sweep) never makes a
// foreground Acquire fail: it waits and gets the key. Taking the key is decided under the
// same lock as the look at who holds it.
func TestForegroundNeverFailsBecauseOfBackground(t *testing.T) {
	var s Set
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if release, ok := s.TryAcquireBackground("k"); ok {
				release()
			}
		}
	}()
	for i := 0; i < 20000; i++ {
		release, ok := s.Acquire(context.Background(), "k")
		if !ok {
			close(stop)
			<-done
			t.Fatalf("Acquire %d failed while only background work held the key", i)
		}
		release()
	}
	close(stop)
	<-done
}
