package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// Router is the node's Mounter when both modes exist on the node. New mounts go to the node's
// current mode; unmount and republish go to whichever mode made the mount, recognised from the
// mount itself, never from the current mode: a mount-s3 FUSE mount directly at the target is
// systemd's, a bind of a shared mount under the pod source root is pod mode's. This is what
// makes switching a node's mode safe with live mounts, in both directions.
type Router struct {
	systemd, pod Mounter
	// unavailable explains why a nil implementation is missing (shown in errors).
	unavailable map[mountmode.Mode]string
	mode        func() mountmode.Mode
	sourceRoot  string
	table       mounttable.Table
	// fellBack, when set, is told of each volume mounted through systemd mode because its
	// Mountpoint Pod could not be placed (SetFallbackReport).
	fellBack func(t Target, why error)
}

var _ Mounter = (*Router)(nil)

// NewRouter returns a Router. systemd or pod may be nil when that mode cannot work on this node;
// why says why (it is reported to callers that need it). mode returns the node's current mode.
// sourceRoot is the directory holding pod mode's shared mounts
// (<kubelet>/plugins/s3.csi.scality.com/mnt).
func NewRouter(systemd, pod Mounter, why map[mountmode.Mode]string, mode func() mountmode.Mode, sourceRoot string) *Router {
	return &Router{systemd: systemd, pod: pod, unavailable: why, mode: mode, sourceRoot: strings.TrimSuffix(sourceRoot, "/")}
}

// NewRouterWithTable is NewRouter reading the mount table from mountinfo (tests).
func NewRouterWithTable(systemd, pod Mounter, why map[mountmode.Mode]string, mode func() mountmode.Mode, sourceRoot, mountinfo string) *Router {
	r := NewRouter(systemd, pod, why, mode, sourceRoot)
	r.table = mounttable.Table{Path: mountinfo}
	return r
}

// Classify reports which mode made the mount at target; mounted is false when no mount-s3 mount
// (live or dead) is there. It reads only the mount table: it never touches the target, so a
// daemon that does not answer cannot block it. Where the kernel tells whether target is a mount
// point (mounttable.Table.Mounted), it does not read the table when target is none, or when it
// is one that a mode records (mounted is then true whatever is on top: the mode checks).
func (r *Router) Classify(target string) (mode mountmode.Mode, mounted bool, err error) {
	if m, known := r.table.Mounted(target); known && !m {
		return "", false, nil // no mount point: no need to read the table
	} else if known {
		// Something is mounted there and a mode records the target: that mode decides, as
		// below, and handles what it finds (a mount of something else included).
		if m := r.recordedBy(target); m != "" {
			return m, true, nil
		}
	}
	entries, err := r.table.List()
	if err != nil {
		return "", false, err
	}
	var top *mounttable.Entry
	for i := range entries {
		if entries[i].MountPoint == target && !mounttable.IsGuard(&entries[i]) {
			top = &entries[i]
		}
	}
	if !mounttable.IsMountS3(top) {
		return "", false, nil
	}
	// A mode's own record of the target decides; the mount table only for mounts without one
	// (a dead bind's device no longer matches the shared mount that replaced it).
	if m := r.recordedBy(target); m != "" {
		return m, true, nil
	}
	return r.classify(top, entries), true, nil
}

// implOf returns the implementation of mode m, nil when it is not available.
func (r *Router) implOf(m mountmode.Mode) Mounter {
	if m == mountmode.Pod {
		return r.pod
	}
	return r.systemd
}

func (r *Router) classify(entry *mounttable.Entry, all []mounttable.Entry) mountmode.Mode {
	for _, e := range all {
		if e.SameFileSystem(entry) && strings.HasPrefix(e.MountPoint, r.sourceRoot+"/") {
			return mountmode.Pod
		}
	}
	return mountmode.Systemd
}

// Counts returns the targets holding mount-s3 mounts below podsDir (kubelet's pods directory)
// by the mode that made them; mountmode.Legacy counts the 1.x driver's (a direct mount-s3 mount
// systemd mode has no record of).
func (r *Router) Counts(podsDir string) (map[mountmode.Mode]int, error) {
	all, err := r.table.List()
	if err != nil {
		return nil, err
	}
	counts := map[mountmode.Mode]int{mountmode.Systemd: 0, mountmode.Pod: 0, mountmode.Legacy: 0}
	// The devices of pod mode's shared mounts, once: classifying each mount against the whole
	// table made a scrape O(mounts²).
	shared := map[[2]int]bool{}
	for i := range all {
		if strings.HasPrefix(all[i].MountPoint, r.sourceRoot+"/") {
			shared[[2]int{all[i].Major, all[i].Minor}] = true
		}
	}
	seen := map[string]bool{} // a target holds two binds of its mount, a repaired one more
	for i := range all {
		if strings.HasPrefix(all[i].MountPoint, podsDir+"/") && mounttable.IsMountS3(&all[i]) && !seen[all[i].MountPoint] {
			seen[all[i].MountPoint] = true
			m := mountmode.Systemd
			if shared[[2]int{all[i].Major, all[i].Minor}] {
				m = mountmode.Pod
			}
			if m == mountmode.Systemd && r.isLegacy(all[i].MountPoint) {
				m = mountmode.Legacy
			}
			counts[m]++
		}
	}
	return counts, nil
}

// Available reports whether this node plugin can mount in mode m (systemd or pod).
func (r *Router) Available(m mountmode.Mode) bool {
	_, err := r.impl(m)
	return err == nil
}

func (r *Router) impl(m mountmode.Mode) (Mounter, error) {
	var impl Mounter
	switch m {
	case mountmode.Systemd:
		impl = r.systemd
	case mountmode.Pod:
		impl = r.pod
	}
	if impl == nil {
		return nil, fmt.Errorf("%w: %s mode is not available on this node: %s", ErrUnavailable, m, r.unavailable[m])
	}
	return impl, nil
}

// Mount routes a republish to the mode that made the existing mount, and a new mount to the
// node's current mode. A target whose mount is gone (a node reboot, say) but which a mode still
// records is that mode's: the workload keeps its mode for its whole life, and no second mode
// starts recording the same target. A new pod-mode mount whose Mountpoint Pod cannot be placed
// (ErrUnplaceable, only with the node plugin's fallback on) is mounted through systemd mode
// when the node has it.
func (r *Router) Mount(ctx context.Context, req Request) error {
	m, mounted, err := r.Classify(req.Target)
	if err != nil {
		return err
	}
	fresh := false // neither mounted nor recorded: the node's mode, or the fallback, decides
	if !mounted {
		m = r.mode()
		rec := r.recordedBy(req.Target)
		if rec != "" && rec != m {
			klog.V(2).InfoS("Target has no mount but a record of another mode; mounting it in that mode", "target", req.Target, "mode", rec, "nodeMode", m)
			m = rec
		}
		fresh = rec == ""
	} else if r.legacyAlone(m) {
		return r.mountLegacy(ctx, req)
	}
	impl, err := r.impl(m)
	if err != nil {
		return err
	}
	err = impl.Mount(ctx, req)
	if m == mountmode.Pod && fresh && errors.Is(err, ErrUnplaceable) && r.systemd != nil {
		return r.fallBack(ctx, req, err)
	}
	return err
}

// fallBack mounts through systemd mode a new volume whose Mountpoint Pod pod mode gave up on
// (why wraps ErrUnplaceable; pod mode left nothing for the target). Systemd mode then records
// the target, so it stays in systemd mode for its workload's life (republish, repair, reboot:
// see Mount); the workload's next incarnation gets the node's mode again. The controller
// detaches a Running workload from a Mountpoint Pod that was never scheduled, so that pod goes.
func (r *Router) fallBack(ctx context.Context, req Request, why error) error {
	klog.InfoS("Mountpoint Pod cannot be placed; mounting through systemd mode", "target", req.Target, "pv", req.PVName, "pod", req.WorkloadNamespace+"/"+req.WorkloadPodName, "why", why.Error())
	if err := r.systemd.Mount(ctx, req); err != nil {
		return fmt.Errorf("%w; the fallback to systemd mode failed too: %w", why, err)
	}
	if r.fellBack != nil {
		r.fellBack(req.PublishedTarget(), why)
	}
	return nil
}

// SetFallbackReport sets f to be told of each volume mounted through systemd mode because its
// Mountpoint Pod could not be placed (after Mount returned; call before serving).
func (r *Router) SetFallbackReport(f func(t Target, why error)) { r.fellBack = f }

// holds reports whether impl keeps state for target: a record, or leftovers of an interrupted
// publish.
func (r *Router) holds(impl Mounter, target string) bool {
	if l, ok := impl.(Leftovers); ok && l.HasLeftovers(target) {
		return true
	}
	rep, ok := impl.(Repairer)
	return ok && rep.Recorded(target)
}

// modes are the mount modes in the order the Router asks them about a target.
var modes = []mountmode.Mode{mountmode.Pod, mountmode.Systemd}

// recordedBy returns the available mode that records target ("" when none does).
func (r *Router) recordedBy(target string) mountmode.Mode {
	for _, m := range modes {
		if rep, ok := r.implOf(m).(Repairer); ok && rep.Recorded(target) {
			return m
		}
	}
	return ""
}

// Unmount routes to the mode that made the mount. A target without a mount-s3 mount belongs to
// neither mode: it goes to a mode only when that mode still holds state for it (an interrupted
// systemd publish may have left a unit and credential files, see Leftovers; after a reboot
// every mode may record targets whose mounts died with the node); otherwise the Router removes
// the empty target directory itself, without dialing systemd or waiting for the Kubernetes API,
// so unpublish works on every node whatever its mode and access.
func (r *Router) Unmount(ctx context.Context, target string) error {
	m, mounted, err := r.Classify(target)
	if err != nil {
		return err
	}
	if !mounted {
		if held, err := r.unmountHolders(ctx, target, ""); held || err != nil {
			return err
		}
		return r.removeTarget(ctx, target)
	}
	if r.legacyAlone(m) {
		return r.unmountLegacy(ctx, target)
	}
	impl, err := r.impl(m)
	if err != nil {
		return err
	}
	if err := impl.Unmount(ctx, target); err != nil {
		return err
	}
	// The other mode may still record the target (a mount it made died and the node's mode
	// mounted it again): its state goes too, so that nothing is left.
	_, err = r.unmountHolders(ctx, target, m)
	return err
}

// unmountHolders unmounts target through every mode but except that holds state for it, and
// reports whether any did.
func (r *Router) unmountHolders(ctx context.Context, target string, except mountmode.Mode) (bool, error) {
	held := false
	for _, m := range modes {
		if impl := r.implOf(m); m != except && r.holds(impl, target) {
			held = true
			if err := impl.Unmount(ctx, target); err != nil {
				return true, fmt.Errorf("remove the %s mode state of %s: %w", m, target, err)
			}
		}
	}
	return held, nil
}

// removeTarget removes a target that holds no mount-s3 mount: nothing when it is gone, an error
// when something else is mounted there (never unmount what is not ours), the guard a publish of
// a release before ADR 0008 left (through pod mode, which can unmount: systemd mode's guards
// always come with state, see Leftovers), and the directory only when empty (never anything
// recursively).
func (r *Router) removeTarget(ctx context.Context, target string) error {
	entries, err := r.table.List()
	if err != nil {
		return err
	}
	for i := range entries {
		e := &entries[i]
		if e.MountPoint != target {
			continue
		}
		if !mounttable.IsGuard(e) {
			return fmt.Errorf("%w: %s holds a %s mount from %s, not a mount-s3 mount; not unmounting it", ErrTargetInUse, target, e.FsType, e.Source)
		}
		if r.pod == nil {
			return fmt.Errorf("%w: %s holds the driver's guard but pod mode, which unmounts it here, is not available: %s", ErrUnavailable, target, r.unavailable[mountmode.Pod])
		}
		return r.pod.Unmount(ctx, target)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.InfoS("Target directory not removed", "target", target, "err", err)
	}
	return nil
}

// Leftovers is implemented by a Mounter that can hold state for a target that has no mount (a
// publish interrupted before its mount appeared). HasLeftovers must answer from local state
// only, without a remote call.
type Leftovers interface {
	HasLeftovers(target string) bool
}

// Mode returns the node's current mode.
func (r *Router) Mode() mountmode.Mode { return r.mode() }
