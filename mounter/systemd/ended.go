package systemd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// How a mount unit ended. A mount unit is kept loaded when it fails (CollectMode=inactive), so
// its Result (systemd's success, exit-code, signal, core-dump, timeout, oom-kill, ...) can be
// read over D-Bus before the unit is stopped and reset for a repair or an unpublish; nothing
// runs in the unit for it. Units started by earlier releases wrote the result to a file in the
// state directory by an ExecStopPost instead; that file is still read for them.

// resultFileName is the file earlier releases' units left their result in.
const resultFileName = "mount-s3.result"

// resultOOMKill is systemd's result of a unit whose process the kernel's OOM killer ended.
const resultOOMKill = "oom-kill"

// maxEndings bounds the endings kept for units whose end nobody asked about.
const maxEndings = 4096

// ending is how one mount unit ended, and when the driver read it.
type ending struct {
	result string
	at     time.Time
}

// endings holds the results of failed mount units by unit name until HowItEnded takes them.
type endings struct {
	mu   sync.Mutex
	byID map[string]ending
}

func (e *endings) put(unit, result string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byID == nil {
		e.byID = map[string]ending{}
	}
	if len(e.byID) >= maxEndings {
		for k := range e.byID { // drop any one: they are only ever read just after being put
			delete(e.byID, k)
			break
		}
	}
	e.byID[unit] = ending{result: result, at: at}
}

func (e *endings) take(unit string) (ending, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	end, ok := e.byID[unit]
	delete(e.byID, unit)
	return end, ok
}

// noteEnding reads the Result of the failed unit name, before it is stopped and reset.
func (m *Mounter) noteEnding(ctx context.Context, c dbusConn, name string) {
	p, err := c.GetServicePropertyContext(ctx, name, "Result")
	if err != nil {
		klog.V(4).InfoS("Could not read how a failed unit ended", "unit", name, "err", err)
		return
	}
	if result, ok := p.Value.Value().(string); ok {
		klog.V(2).InfoS("Mount unit failed", "unit", name, "result", result)
		m.endings.put(name, result, time.Now())
	}
}

// HowItEnded implements mounter.EndReporter: the result the unit of target's mount ended with
// (read when the unit was reset, at or after since less a minute); an OOM kill is reported with
// the unit's MemoryMax.
func (m *Mounter) HowItEnded(_ context.Context, target string, since time.Time) mounter.Ending {
	unit := MountUnitName(target)
	dir := m.stateDir(target)
	result := ""
	if end, ok := m.endings.take(unit); ok && !end.at.Before(since.Add(-time.Minute)) {
		result = end.result
	} else {
		result = earlierReleaseResult(dir, since)
	}
	if result != resultOOMKill {
		return mounter.Ending{}
	}
	rec, err := m.records.read(dir)
	limit := "no MemoryMax (the node ran out of memory)"
	if err == nil && rec.Resources.MemoryMax > 0 {
		limit = "its MemoryMax=" + resource.NewQuantity(int64(rec.Resources.MemoryMax), resource.BinarySI).String()
	}
	return mounter.Ending{OOMKilled: true, Detail: fmt.Sprintf("mount-s3 (unit %s) was OOM-killed at %s", unit, limit)}
}

// earlierReleaseResult reads the result file an earlier release's unit left in dir, when it
// was written at or after since less a minute.
func earlierReleaseResult(dir string, since time.Time) string {
	// The unit's own processes wrote the file: never follow a link there, read a few bytes.
	f, err := os.OpenFile(filepath.Join(dir, resultFileName), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0) //nolint:gosec // G304: the driver's own state directory
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.ModTime().Before(since.Add(-time.Minute)) {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
