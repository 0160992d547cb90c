package mounthealth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

const mountinfo = `1 0 8:1 / / rw - ext4 /dev/vda rw
10 1 0:40 / /k/pods/a/mount rw - fuse mountpoint-s3 rw
11 1 0:41 / /k/pods/b/mount rw - tmpfs tmpfs rw
12 1 0:42 / /k/pods/c/mount rw - tmpfs tmpfs rw
13 12 0:43 / /k/pods/c/mount rw - fuse mountpoint-s3 rw
20 1 0:50 / /k/pods/d/mount ro - tmpfs s3csi-guard ro
21 20 0:51 / /k/pods/d/mount rw - fuse mountpoint-s3 rw
22 1 0:52 / /k/pods/e/mount ro - tmpfs s3csi-guard ro
`

func table(t *testing.T) mounttable.Table {
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return mounttable.Table{Path: p}
}

func TestCheckStates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string
		statfs error
		want   State
	}{
		{"nothing mounted", "/k/pods/none/mount", nil, Absent},
		{"another filesystem", "/k/pods/b/mount", nil, Foreign},
		{"answering daemon", "/k/pods/a/mount", nil, Live},
		{"daemon answers with an error", "/k/pods/a/mount", syscall.ENOSYS, Live},
		{"daemon gone", "/k/pods/a/mount", syscall.ENOTCONN, Dead},
		{"connection aborted", "/k/pods/a/mount", syscall.ECONNABORTED, Dead},
		{"I/O error", "/k/pods/a/mount", syscall.EIO, Dead},
		{"mount-s3 on top of another mount", "/k/pods/c/mount", nil, Live},
		{"mount-s3 on its guard", "/k/pods/d/mount", nil, Live},
		{"the guard alone", "/k/pods/e/mount", nil, Absent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed := false
			c := &Checker{Table: table(t), Statfs: func(string) error { probed = true; return tc.statfs }}
			r, err := c.Check(context.Background(), tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if r.State != tc.want {
				t.Errorf("state = %s (cause %v), want %s", r.State, r.Cause, tc.want)
			}
			if (r.State == Dead) != (r.Cause != nil) {
				t.Errorf("cause %v with state %s", r.Cause, r.State)
			}
			if guarded := tc.path == "/k/pods/d/mount" || tc.path == "/k/pods/e/mount"; r.Guarded != guarded {
				t.Errorf("guarded = %v, want %v", r.Guarded, guarded)
			}
			// Only a mount-s3 mount is ever touched.
			if probed != (tc.want == Live || tc.want == Dead) {
				t.Errorf("probed = %v for a %s path", probed, tc.want)
			}
			// The same answer from one read of the table (the monitor's sweep), which is not
			// read again: the file is gone.
			snap, err := c.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(c.Table.Path); err != nil {
				t.Fatal(err)
			}
			if got := c.CheckIn(context.Background(), tc.path, snap); got.State != r.State || got.Guarded != r.Guarded || len(got.Ours) != len(r.Ours) {
				t.Errorf("CheckIn = %s guarded %v ours %d, Check = %s guarded %v ours %d", got.State, got.Guarded, len(got.Ours), r.State, r.Guarded, len(r.Ours))
			}
		})
	}
}

// TestCheckNeverBlocks: a daemon that does not answer makes the check return Dead at its
// deadline, and later checks of that path return Dead at once while the first probe is stuck.
// TestOurs: the mounts the driver may remove, top first, stop at a mount of something else.
func TestOurs(t *testing.T) {
	c := &Checker{Table: table(t), Statfs: func(string) error { return nil }}
	for path, want := range map[string][]string{
		"/k/pods/a/mount": {"mountpoint-s3"},
		"/k/pods/b/mount": nil,
		"/k/pods/c/mount": {"mountpoint-s3"}, // the tmpfs below is someone else's
		"/k/pods/d/mount": {"mountpoint-s3", "s3csi-guard"},
		"/k/pods/e/mount": {"s3csi-guard"},
	} {
		r, err := c.Check(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range r.Ours {
			got = append(got, e.Source)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: ours = %v, want %v", path, got, want)
		}
	}
}

func TestCheckNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	c := &Checker{Table: table(t), Timeout: 100 * time.Millisecond, Statfs: func(string) error {
		calls.Add(1)
		<-release
		return syscall.ECONNABORTED
	}}
	start := time.Now()
	r, err := c.Check(context.Background(), "/k/pods/a/mount")
	if err != nil || r.State != Dead || !errors.Is(r.Cause, ErrNoAnswer) {
		t.Fatalf("Check = %+v, %v; want Dead: no answer", r, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the check took %v with a 100ms deadline", d)
	}
	start = time.Now()
	r, _ = c.Check(context.Background(), "/k/pods/a/mount")
	if r.State != Dead || time.Since(start) > time.Second || calls.Load() != 1 {
		t.Errorf("second check = %s after %v with %d probes; want Dead at once, one probe", r.State, time.Since(start), calls.Load())
	}
	close(release) // the mount was aborted: the stuck probe returns
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the returned probe is still pending")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Statfs = func(string) error { return nil }
	if r, _ := c.Check(context.Background(), "/k/pods/a/mount"); r.State != Live {
		t.Errorf("after the probe returned: %s, want a fresh probe (Live)", r.State)
	}
}

// TestConcurrentChecksShareOneProbe: a check that finds a probe of its path in flight, younger
// than the deadline, waits for that probe's answer instead of calling the mount dead (the
// monitor's sweep and a publish's own check often meet on one target).
func TestConcurrentChecksShareOneProbe(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	c := &Checker{Table: table(t), Timeout: 5 * time.Second, Statfs: func(string) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil
	}}
	first := make(chan Result, 1)
	go func() {
		r, _ := c.Check(context.Background(), "/k/pods/a/mount")
		first <- r
	}()
	<-started
	second := make(chan Result, 1)
	go func() {
		r, _ := c.Check(context.Background(), "/k/pods/a/mount")
		second <- r
	}()
	time.Sleep(50 * time.Millisecond) // the second check is waiting on the first's probe
	close(release)
	for i, ch := range []chan Result{first, second} {
		if r := <-ch; r.State != Live {
			t.Errorf("check %d = %s (%v), want Live: the daemon answered", i+1, r.State, r.Cause)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d probes for two checks at the same time, want 1", n)
	}
}

// TestProbeAnsweredByAnotherFilesystem: the real probe, at a path that holds no FUSE mount (the
// mount the table showed was unmounted since), says so instead of counting the answer of the
// filesystem under it as the daemon's.
func TestProbeAnsweredByAnotherFilesystem(t *testing.T) {
	c := &Checker{}
	err := c.Probe(context.Background(), t.TempDir())
	if !errors.Is(err, ErrNotFUSE) {
		t.Fatalf("Probe of a plain directory = %v, want ErrNotFUSE", err)
	}
}

// TestLookup: where the kernel cannot say (a table of the test's own), a lookup reads the table
// at its first question and answers the next ones from that read, even after the table changed.
func TestLookup(t *testing.T) {
	ctx := context.Background()
	tb := table(t)
	c := &Checker{Table: tb, Statfs: func(string) error { return nil }}
	look := c.Lookup()
	if r, err := look.Check(ctx, "/k/pods/a/mount"); err != nil || r.State != Live {
		t.Fatalf("first question: %v, %v; want Live", r.State, err)
	}
	if err := os.WriteFile(tb.Path, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := look.Check(ctx, "/k/pods/b/mount"); err != nil || r.State != Foreign {
		t.Errorf("second question: %v, %v; want Foreign, from the first read", r.State, err)
	}
	if r, err := c.Lookup().Check(ctx, "/k/pods/b/mount"); err != nil || r.State != Absent {
		t.Errorf("a new lookup: %v, %v; want Absent, from a new read", r.State, err)
	}
}
