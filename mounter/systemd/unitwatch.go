package systemd

import (
	"context"
	"strings"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"k8s.io/klog/v2"
)

// stopGrace is how long after one of the mounter's own stops the unit's signals are still
// taken for that stop's: systemd may send the last PropertiesChanged after the job's end. The
// unit running again (a repair's or a republish's new mount-s3) ends it sooner: systemd sent
// the old instance's last signals before the new instance started.
const stopGrace = 5 * time.Second

// unitWatch tells, from systemd's PropertiesChanged signals, when a mount unit that was running
// stopped running on its own (mount-s3 exited, was killed): the moments the mount monitor must
// look at once. A unit starting (dead, start, start-post, then running) or stopped by the
// mounter itself (an unpublish, a repair) is not such a moment; telling the monitor made it
// probe every mount of the node at every publish and unpublish, a thousand statfs through FUSE
// at a thousand mounts, competing with systemd for the node's CPU during the publish.
type unitWatch struct {
	mu       sync.Mutex
	stopping map[string]stop // units the mounter stops or stopped
}

// stop is one of the mounter's stops of a unit: until when the unit's signals are its own.
type stop struct {
	until time.Time
	ended bool // stopEnds was called: until is the end of the grace
}

// stopBegins records that the mounter is stopping unit.
func (w *unitWatch) stopBegins(unit string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for u, st := range w.stopping {
		if now.After(st.until) {
			delete(w.stopping, u)
		}
	}
	if w.stopping == nil {
		w.stopping = map[string]stop{}
	}
	w.stopping[unit] = stop{until: now.Add(24 * time.Hour)} // until stopEnds
}

// stopEnds records that the mounter's stop of unit ended; its signals are taken for the stop's
// for stopGrace more.
func (w *unitWatch) stopEnds(unit string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopping[unit] = stop{until: time.Now().Add(stopGrace), ended: true}
}

func (w *unitWatch) ownStop(unit string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.stopping[unit]
	return ok && time.Now().Before(st.until)
}

// runningAgain ends the grace of an ended stop of unit: the unit runs again, so its next exit
// is not that stop's. (A signal backlog longer than a whole publish and unpublish could make an
// old instance's running look new: the monitor then checks once for nothing; no death goes
// unreported.)
func (w *unitWatch) runningAgain(unit string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.stopping[unit]; ok && st.ended {
		delete(w.stopping, unit)
	}
}

// isMountUnit reports whether unit is a mount unit of this driver (not an unmount unit, not the
// user's oneshot).
func isMountUnit(unit string) bool {
	return strings.HasPrefix(unit, "mount-s3-") && !strings.HasPrefix(unit, "mount-s3-umount-") && unit != userUnitName
}

// subState returns the SubState a signal carries.
func subState(u *sd.PropertiesUpdate) (string, bool) {
	v, ok := u.Changed["SubState"]
	if !ok {
		return "", false
	}
	sub, ok := v.Value().(string)
	return sub, ok
}

// left reports whether u says a mount unit that running holds (the units seen running on
// this connection) stopped running, other than by the mounter's own stop; it keeps running up
// to date.
func (w *unitWatch) left(running map[string]bool, u *sd.PropertiesUpdate) bool {
	if !isMountUnit(u.UnitName) {
		return false
	}
	sub, ok := subState(u)
	if !ok {
		return false
	}
	if sub == "running" {
		running[u.UnitName] = true
		w.runningAgain(u.UnitName)
		return false
	}
	was := running[u.UnitName]
	delete(running, u.UnitName)
	return was && !w.ownStop(u.UnitName)
}

// seed returns the mount units running now, as a new connection's starting point: a unit that
// was running before the connection and stops on its own is then seen too.
func seed(c dbusConn) map[string]bool {
	running := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), defaultCallTimeout)
	defer cancel()
	units, err := c.ListUnitsByPatternsContext(ctx, []string{"active"}, []string{"mount-s3-*.service"})
	if err != nil {
		// The connection is likely gone; the next one seeds again, the periodic sweep covers.
		klog.V(2).InfoS("Listing the running mount units for the unit watch", "err", err)
		return running
	}
	for _, u := range units {
		if u.SubState == "running" && isMountUnit(u.Name) {
			running[u.Name] = true
		}
	}
	return running
}
