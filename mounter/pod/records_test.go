package pod

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestTargetRecordsInMemory: the mounter's own saves and removals are the list between full
// scans; a record written behind its back shows at the next scan; nothing is read in between.
func TestTargetRecordsInMemory(t *testing.T) {
	c := &targetRecords{dir: filepath.Join(t.TempDir(), "targets")}
	targets := func() []string {
		var out []string
		for _, r := range c.list() {
			out = append(out, r.Target)
		}
		return out
	}
	if got := targets(); len(got) != 0 {
		t.Fatalf("no directory yet: %v", got)
	}
	if err := c.save(filepath.Join(c.dir, "a.json"), targetRecord{Target: "/k/a", MountpointPod: "mp"}); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(c.dir, "b.json"), targetRecord{Target: "/k/b"}); err != nil {
		t.Fatal(err)
	}
	if got := targets(); !slices.Equal(got, []string{"/k/a"}) {
		t.Fatalf("before the next scan: %v, want only the saved record", got)
	}
	if r, ok := c.get(filepath.Join(c.dir, "a.json")); !ok || r.MountpointPod != "mp" {
		t.Fatalf("get = %+v, %v", r, ok)
	}
	c.mu.Lock()
	c.scanned = c.scanned.Add(-rescanEvery)
	c.mu.Unlock()
	if got := targets(); !slices.Equal(got, []string{"/k/a", "/k/b"}) {
		t.Fatalf("after a scan: %v", got)
	}
	c.remove(filepath.Join(c.dir, "a.json"))
	if _, ok := c.get(filepath.Join(c.dir, "a.json")); ok {
		t.Error("a removed record is still there")
	}
	c.mu.Lock()
	c.scanned = c.scanned.Add(-rescanEvery)
	c.mu.Unlock()
	if got := targets(); !slices.Equal(got, []string{"/k/b"}) {
		t.Fatalf("a removed record came back at the next scan: %v", got)
	}
}
