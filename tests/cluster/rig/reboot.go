package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"
)

// nodeDaemons are the rig's daemons that run on the node itself and go down with it; the
// control plane and the S3 server stay (in a real cluster they run elsewhere).
var nodeDaemons = []string{"kubelet", "containerd", "systemd"}

// Reboot power-cycles the node, from inside NetNS (the cluster suite runs there): every process
// of the node is killed at once with SIGKILL — kubelet, every container, containerd and its
// shims, the systemd user manager with its units (systemd mode's mount-s3) —, every mount below
// the kubelet directory and the rig's runtime directory goes, and the runtime state that lives on
// a tmpfs on a real node (containerd's state, the user manager's runtime directory with its
// transient units, the pods' network namespaces) is wiped. Then
// containerd, the systemd user manager and kubelet start again as at boot, and Reboot returns
// once the node is Ready. What is on the node's disk stays: the kubelet directory (pod
// directories, plugin registrations, the driver's records), containerd's images, the CNI
// allocations. The caller may change the cluster while the node is down (down runs then).
func Reboot(ctx context.Context, log io.Writer, down func() error) error {
	st, err := LoadState()
	if err != nil {
		return err
	}
	u := &upper{opts: Options{Bin: st.Bin, Log: log}, state: st, daemons: map[string]*daemon{}, start: time.Now()}
	ino := netnsInode()
	if ino == 0 || !inNetNS(os.Getpid(), ino) {
		return fmt.Errorf("Reboot must run inside network namespace %s", NetNS)
	}

	// Power off: everything of the node, at once.
	keep := map[int]bool{}
	for pid := os.Getpid(); pid > 1; pid = parentOf(pid) {
		keep[pid] = true // this process and its ancestors (rigctl)
	}
	var kept []Process
	for _, p := range st.Processes {
		if slices.Contains(nodeDaemons, p.Name) {
			continue
		}
		kept = append(kept, p)
		if alive(p.PID, p.Exe) {
			keep[p.PID] = true
		}
	}
	victims := processesWhere(func(pid int) bool {
		if keep[pid] {
			return false
		}
		return inNetNS(pid, ino) || inKubepods(pid)
	})
	killAll(victims)
	u.logf("power off: %d processes killed", len(victims))
	st.Processes = kept
	if err := st.save(); err != nil {
		return err
	}

	// What does not survive a reboot: mounts (deepest first; the kubelet directory's own
	// shared bind stays, it is the rig's stand-in for the node's disk), and tmpfs contents.
	var mounts []string
	for _, root := range []string{KubeletDir, RunDir} {
		for _, m := range mountsBelow(root) {
			if m != KubeletDir {
				mounts = append(mounts, m)
			}
		}
	}
	var podNetNS []string
	for _, ns := range netnsEntries() {
		if ns != NetNS && !slices.Contains(st.NetNSBefore, ns) {
			podNetNS = append(podNetNS, filepath.Join("/run/netns", ns))
		}
	}
	mounts = append(mounts, podNetNS...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for _, ns := range podNetNS {
		_ = os.Remove(ns)
	}
	// /run is a tmpfs: containerd's state and the user manager's runtime directory (its
	// sockets and transient unit files) do not survive.
	for _, d := range []string{containerdState, systemdRuntimeDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	u.logf("power off: %d mounts gone", len(mounts))

	if down != nil {
		if err := down(); err != nil {
			return fmt.Errorf("while the node was down: %w", err)
		}
	}

	// Boot.
	for _, s := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"containerd", u.startContainerd},
		{"systemd user manager", u.startSystemd},
		{"kubelet", u.startKubelet},
	} {
		t := time.Now()
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("boot: %s: %w", s.name, err)
		}
		u.logf("boot: %s ready (%.1fs)", s.name, time.Since(t).Seconds())
	}
	return nil
}
