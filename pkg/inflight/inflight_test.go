package inflight

import (
	"sync"
	"sync/atomic"
	"testing"
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
