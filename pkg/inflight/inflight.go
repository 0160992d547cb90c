// Package inflight serialises operations per key (a target path) without a global lock: a
// second operation on a busy key is refused at once rather than queued, which is what CSI
// expects (the caller gets Aborted and retries).
package inflight

import "sync"

// Set records keys with an operation in progress. The zero value is ready to use.
type Set struct {
	mu   sync.Mutex
	busy map[string]struct{}
}

// TryAcquire marks key busy and returns a function that releases it, or ok=false when an
// operation on key is already in progress. The release function is safe to call more than once.
func (s *Set) TryAcquire(key string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.busy[key]; busy {
		return nil, false
	}
	if s.busy == nil {
		s.busy = map[string]struct{}{}
	}
	s.busy[key] = struct{}{}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.busy, key)
			s.mu.Unlock()
		})
	}, true
}
