package rig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// Down stops everything the rig started and removes everything it created, from the state file
// when there is one and by the rig's fixed names otherwise (a rig that crashed before saving
// its state): processes (its daemons, every process in NetNS, in the second node's network
// namespace or in a kubepods cgroup, mount-s3 from the install directory), mounts below the
// kubelet directory and the rig's directories (the second node's mount namespace is one of
// them), containerd's pod network namespaces and the second node's, NetNS itself (its veth,
// bridge and iptables rules go with it), the kubelets' cgroups, and the directories that did
// not exist before Up. Logs are
// copied to keepLogs first when it is not empty. It is idempotent and reports every step that
// failed.
func Down(keepLogs string, log io.Writer) error {
	logf := func(format string, args ...any) {
		if log != nil {
			fmt.Fprintf(log, "[rig down] %s\n", fmt.Sprintf(format, args...))
		}
	}
	st, err := LoadState()
	if err != nil {
		if _, serr := os.Stat(netnsPath); serr != nil && !exists(DataDir) && !exists(RunDir) {
			return nil // nothing to tear down
		}
		logf("no state file (%v); tearing down by name", err)
		st = &State{}
	}
	var errs []error
	if keepLogs != "" && exists(logDir) {
		if err := copyLogs(keepLogs); err != nil {
			errs = append(errs, fmt.Errorf("keep logs: %w", err))
		}
	}

	// 1. Processes: kubelet first (it would restart containers), then every container (by
	// their kubepods cgroups), the rest of the rig's daemons, and whatever still runs inside
	// NetNS or from the mount-s3 install directory (systemd units, orphaned shims).
	for i := len(st.Processes) - 1; i >= 0; i-- {
		if p := st.Processes[i]; strings.HasPrefix(p.Name, "kubelet") && alive(p.PID, p.Exe) {
			stopPID(p.PID, 10*time.Second)
		}
	}
	killAll(processesWhere(inKubepods))
	for i := len(st.Processes) - 1; i >= 0; i-- {
		if p := st.Processes[i]; alive(p.PID, p.Exe) {
			stopPID(p.PID, 10*time.Second)
		}
	}
	for _, ino := range []uint64{netnsInode(), nsInode(filepath.Join("/run/netns", SecondNodeNetNS))} {
		if ino != 0 {
			killAll(processesWhere(func(pid int) bool { return inNetNS(pid, ino) }))
		}
	}
	killAll(processesWhere(func(pid int) bool { return exeUnder(pid, MountS3InstallDir) || inKubepods(pid) }))
	logf("processes stopped")

	// 2. Mounts, deepest first, lazily (a dead FUSE mount must not block the teardown).
	var mounts []string
	roots := []string{KubeletDir, DataDir, RunDir, MountS3InstallDir}
	if slices.Contains(st.Created, "/run/netns") {
		roots = append(roots, "/run/netns") // `ip netns add` made it a mount of its own
	}
	for _, root := range roots {
		mounts = append(mounts, mountsBelow(root)...)
	}
	for _, ns := range netnsEntries() {
		if ns != NetNS && !slices.Contains(st.NetNSBefore, ns) {
			mounts = append(mounts, filepath.Join("/run/netns", ns))
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for _, ns := range netnsEntries() {
		if ns != NetNS && !slices.Contains(st.NetNSBefore, ns) {
			_ = os.Remove(filepath.Join("/run/netns", ns))
		}
	}
	logf("%d mounts removed", len(mounts))

	// 3. The network namespace, then cgroups and directories.
	if err := deleteNetNS(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupTrees("kubepods", secondCgroupNS); err != nil {
		errs = append(errs, err)
	}
	created := slices.Clone(st.Created)
	// A crashed rig without a state file: its own directories are always its own.
	for _, d := range []string{DataDir, RunDir} {
		if !slices.Contains(created, d) {
			created = append(created, d)
		}
	}
	sort.Slice(created, func(i, j int) bool { return len(created[i]) > len(created[j]) })
	for _, p := range created {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	// The chart's hostPath directories kubelet created for the node plugin: removed when empty
	// (a non-empty one would be a leak for the uninstall step to report, not to hide).
	for _, d := range []string{"/run/s3.csi.scality.com", "/var/cache/s3.csi.scality.com"} {
		_ = os.Remove(d)
	}
	logf("done")
	return errors.Join(errs...)
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// killAll sends SIGKILL to every pid and waits for them to go.
func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// mountsBelow lists the mount points at or below root.
func mountsBelow(root string) []string {
	entries, _ := mounttable.Table{}.List()
	var out []string
	for _, e := range entries {
		if e.MountPoint == root || strings.HasPrefix(e.MountPoint, root+"/") {
			out = append(out, e.MountPoint)
		}
	}
	return out
}

func netnsEntries() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// removeCgroupTrees removes the cgroups of the rig's kubelets (kubepods with its QoS and pod
// children, the second node's root with its kubepods), deepest first, in every cgroup v1
// hierarchy and in the unified one: the trees named names at the top of each hierarchy.
func removeCgroupTrees(names ...string) error {
	var dirs, roots []string
	for _, name := range names {
		found, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
		roots = append(roots, found...)
		if exists("/sys/fs/cgroup/" + name) {
			roots = append(roots, "/sys/fs/cgroup/"+name)
		}
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// copyLogs copies the rig's logs (and the node plugin and controller container logs kubelet
// kept) to dir.
func copyLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := exec.Command("cp", "-a", logDir+"/.", dir).Run(); err != nil {
		return err
	}
	if exists(podLogsDir) {
		_ = exec.Command("cp", "-a", podLogsDir, filepath.Join(dir, "pods")).Run()
	}
	if n := secondNode(); exists(n.podLogsDir) {
		_ = exec.Command("cp", "-a", n.podLogsDir, filepath.Join(dir, "pods"+n.suffix)).Run()
	}
	return nil
}
