// Package inflight serialises operations per key without a global lock. It is the driver's one
// keyed lock:
//   - CSI calls on a key (a target path, a bucket) use TryAcquire or Acquire: a second call on a
//     busy key is refused at once rather than queued, which is what CSI expects (the caller gets
//     Aborted and retries). Background work (the node plugin's own mount monitor) is the
//     exception: kubelet's calls wait for it rather than fail because of it.
//   - Internal critical sections (pod mode's per-Mountpoint-Pod work) use Lock, which waits.
//
// A Set keeps no state for free keys.
package inflight

import (
	"context"
	"sync"
)

// Set records keys with an operation in progress. The zero value is ready to use.
type Set struct {
	mu sync.Mutex
	// busy maps a busy key to whether background work holds it.
	busy map[string]bool
	// released is closed (and replaced) whenever a key is released.
	released chan struct{}
}

// TryAcquire marks key busy and returns a function that releases it, or ok=false when an
// operation on key is already in progress. The release function is safe to call more than once.
func (s *Set) TryAcquire(key string) (release func(), ok bool) {
	return s.try(key, false)
}

// TryAcquireBackground is TryAcquire for background work: Acquire waits for it to finish
// instead of failing.
func (s *Set) TryAcquireBackground(key string) (release func(), ok bool) {
	return s.try(key, true)
}

// Acquire is TryAcquire that waits, until ctx ends, while background work holds key; it fails
// at once when another foreground operation holds it.
func (s *Set) Acquire(ctx context.Context, key string) (release func(), ok bool) {
	for {
		s.mu.Lock()
		background, busy := s.busy[key]
		if !busy || !background {
			// Decided and taken under one lock: background work that takes the key again
			// between a wake-up and the take must make this call wait, not fail.
			release, ok := s.tryLocked(key, false)
			s.mu.Unlock()
			return release, ok
		}
		if s.released == nil {
			s.released = make(chan struct{})
		}
		wait := s.released
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// Lock waits until key is free and takes it, whoever holds it now; it returns ctx's error when
// ctx ends first. Waiters are not queued in order.
func (s *Set) Lock(ctx context.Context, key string) (release func(), err error) {
	for {
		s.mu.Lock()
		if _, busy := s.busy[key]; !busy {
			s.mu.Unlock()
			if release, ok := s.try(key, false); ok {
				return release, nil
			}
			continue // taken in between
		}
		if s.released == nil {
			s.released = make(chan struct{})
		}
		wait := s.released
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Set) try(key string, background bool) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tryLocked(key, background)
}

// tryLocked is try with s.mu held.
func (s *Set) tryLocked(key string, background bool) (func(), bool) {
	if _, busy := s.busy[key]; busy {
		return nil, false
	}
	if s.busy == nil {
		s.busy = map[string]bool{}
	}
	s.busy[key] = background
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.busy, key)
			if s.released != nil {
				close(s.released)
				s.released = nil
			}
			s.mu.Unlock()
		})
	}, true
}
