package pod

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// targetRecords keeps the target records in memory. Only this mounter writes and removes them,
// and it does so through save and remove, so between full scans of the records directory (at
// most rescanEvery apart) the cache is the list: a monitor sweep at a thousand targets reads
// no file. A scan (the first use, then every rescanEvery) reads every record again, so a record
// left by an earlier process or changed behind the mounter's back shows within that time.
type targetRecords struct {
	dir string

	mu      sync.Mutex
	byPath  map[string]targetRecord // by record file
	scanned time.Time               // last full scan (zero: none yet)
}

// rescanEvery bounds how long the cache serves the list without reading the directory.
const rescanEvery = 30 * time.Second

// scanLocked reads every record again when the last scan is older than rescanEvery.
func (c *targetRecords) scanLocked(now time.Time) {
	if !c.scanned.IsZero() && now.Sub(c.scanned) < rescanEvery {
		return
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil && !os.IsNotExist(err) {
		return // unreadable: the next call tries again
	}
	byPath := make(map[string]targetRecord, len(entries))
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue // a record being written
		}
		path := filepath.Join(c.dir, e.Name())
		if rec, err := readTargetRecord(path); err == nil {
			byPath[path] = rec
		}
	}
	c.byPath, c.scanned = byPath, now
}

// list returns every record, sorted by target.
func (c *targetRecords) list() []targetRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scanLocked(time.Now())
	out := make([]targetRecord, 0, len(c.byPath))
	for _, r := range c.byPath {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

// get returns the record in file path.
func (c *targetRecords) get(path string) (targetRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scanLocked(time.Now())
	r, ok := c.byPath[path]
	return r, ok
}

// save writes rec to path, then caches it.
func (c *targetRecords) save(path string, rec targetRecord) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := writeJSON(path, rec); err != nil {
		delete(c.byPath, path) // whatever is on disk now, the next scan reads it
		return err
	}
	if c.byPath != nil {
		c.byPath[path] = rec
	}
	return nil
}

// remove removes the record in path.
func (c *targetRecords) remove(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = os.Remove(path)
	delete(c.byPath, path)
}
