package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The second node (AddNode): a node of its own beside the first, sharing only the control
// plane and the S3 server with it, as two machines of one cluster do.
const (
	// SecondNodeName is the second node's name.
	SecondNodeName = "s3csi-node-b"
	// SecondNodeIP is its address, on a veth whose other end, in NetNS, is its gateway.
	SecondNodeIP = "10.213.1.2"
	// SecondNodeNetNS is its network namespace.
	SecondNodeNetNS = "s3csi-e2e-b"
	secondGateway   = "10.213.1.1"
	secondPodCIDR   = "10.89.0.0/16"
	// Veth ends: the first in NetNS, the second in SecondNodeNetNS.
	vethToSecond   = "s3csib0"
	vethOfSecond   = "s3csib1"
	secondCgroupNS = "s3csi-node-b"
)

// node is what differs between the rig's nodes: names, addresses and each daemon's own files.
// Every path is as this process (in the host's mount namespace) sees it, except that the
// second node finds its own directories at the first node's paths where the chart or kubelet
// fix them (KubeletDir, the install and credential directories, the user manager's runtime
// directory): its mount namespace binds them there.
type node struct {
	name, ip, podCIDR string
	dataDir           string // its configuration files
	containerdRoot    string
	containerdState   string
	containerdSocket  string
	cniConfDir        string
	cniIPAMDir        string
	optDir            string
	podLogsDir        string
	kubeconfig        string
	etcDir            string // the user manager's /etc
	xdgDir            string // the user manager's runtime directory
	cgroupRoot        string // kubelet's cgroupRoot ("" for the machine's root)
	labels            []string
	// enter is the argv prefix that runs a program in the node's namespaces (nil: this
	// process's); suffix is added to its daemons' names.
	enter  []string
	suffix string
}

// firstNode is the node Up starts (NodeName): the host's mount namespace, NetNS.
func firstNode() *node {
	return &node{
		name: NodeName, ip: NodeIP, podCIDR: PodCIDR, dataDir: DataDir,
		containerdRoot: containerdRoot, containerdState: containerdState, containerdSocket: containerdSocket,
		cniConfDir: cniConfDir, cniIPAMDir: filepath.Join(DataDir, "cni-ipam"), optDir: filepath.Join(DataDir, "opt"),
		podLogsDir: podLogsDir, kubeconfig: kubeletKubeconfig, etcDir: EtcDir, xdgDir: systemdRuntimeDir,
	}
}

// Directories of the second node.
var (
	secondData  = filepath.Join(DataDir, "node-b")
	secondRun   = filepath.Join(RunDir, "node-b")
	secondNSDir = filepath.Join(RunDir, "node-b-ns")
	// secondMountNS is the bind mount that keeps its mount namespace.
	secondMountNS = filepath.Join(secondNSDir, "mnt")
)

// secondNode is the node AddNode starts (SecondNodeName): a mount namespace of its own
// (secondMountNS) and SecondNodeNetNS. It registers in pod mode (a kubelet --node-labels, as an
// administrator labels a node at provisioning).
func secondNode() *node {
	return &node{
		name: SecondNodeName, ip: SecondNodeIP, podCIDR: secondPodCIDR, dataDir: secondData,
		containerdRoot: filepath.Join(secondData, "containerd"), containerdState: filepath.Join(secondRun, "containerd"),
		containerdSocket: filepath.Join(secondRun, "containerd", "containerd.sock"),
		cniConfDir:       filepath.Join(secondData, "cni"), cniIPAMDir: filepath.Join(secondData, "cni-ipam"),
		optDir: filepath.Join(secondData, "opt"), podLogsDir: filepath.Join(secondData, "pod-logs"),
		kubeconfig: filepath.Join(DataDir, "kubelet-b.kubeconfig"), etcDir: filepath.Join(secondData, "etc"),
		xdgDir: filepath.Join(secondRun, "xdg"), cgroupRoot: "/" + secondCgroupNS,
		labels: []string{"s3.csi.scality.com/mounter=pod"},
		enter:  []string{"nsenter", "--mount=" + secondMountNS, "--net=" + filepath.Join("/run/netns", SecondNodeNetNS), "--"},
		suffix: "-b",
	}
}

// secondBinds are the second node's own directories bound, in its mount namespace, over the
// paths the chart, kubelet and containerd fix: host path (as the node sees it) -> its own.
func secondBinds() [][2]string {
	return [][2]string{
		{KubeletDir, filepath.Join(secondData, "kubelet")},
		{MountS3InstallDir, filepath.Join(secondData, "mount-s3-install")},
		{"/run/s3.csi.scality.com", filepath.Join(secondRun, "credentials")},
		{"/var/cache/s3.csi.scality.com", filepath.Join(secondData, "cache")},
		{systemdRuntimeDir, filepath.Join(secondRun, "xdg")},
		{"/run/containerd", filepath.Join(secondRun, "run-containerd")},
		{"/var/lib/cni", filepath.Join(secondData, "var-lib-cni")},
		{"/var/log/containers", filepath.Join(secondData, "var-log-containers")},
	}
}

// SecondNodeSystemctl runs `systemctl --user ARGS` against the second node's user manager.
func SecondNodeSystemctl(args ...string) (string, error) {
	return userManagerAt(secondNode().xdgDir, "systemctl", args...)
}

// SecondNodeRoot is a path under which this process sees the second node's file system as the
// node does (its kubelet directory with the pods' volumes and mounts): /proc/<pid>/root of a
// process in its mount namespace. "" when the node is not up.
func SecondNodeRoot() string {
	st, err := LoadState()
	if err != nil {
		return ""
	}
	for _, p := range st.Processes {
		if p.Name == "kubelet"+secondNode().suffix && alive(p.PID, p.Exe) {
			return fmt.Sprintf("/proc/%d/root", p.PID)
		}
	}
	return ""
}

// SecondNodeMountInfo returns the second node's mount table (/proc/<pid>/mountinfo of its
// kubelet); an error when the node is not up.
func SecondNodeMountInfo() (string, error) {
	root := SecondNodeRoot()
	if root == "" {
		return "", errors.New("the second node is not up")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(root), "mountinfo"))
	return string(b), err
}

// AddNode brings up the second node and returns once it is Ready: its network namespace,
// routed to NetNS (the control plane and the S3 server) through a veth, with the `kubernetes`
// Service DNAT of its own; a mount namespace of its own, a slave of the host's (the host's
// unmounts reach it, its mounts stay its own) with its own kubelet directory, install and
// credential directories, containerd runtime directory and user manager runtime directory bound
// over the paths the chart and kubelet use; cgroups of its own; then containerd, the images,
// kubelet (registering in pod mode) and a systemd user manager in it. It must run inside NetNS
// (the cluster suite does). StopNode undoes it; Down also does.
func AddNode(ctx context.Context, log io.Writer) error {
	st, err := LoadState()
	if err != nil {
		return err
	}
	u := &upper{opts: Options{Bin: st.Bin, Log: log}, state: st, daemons: map[string]*daemon{}, start: time.Now()}
	if ino := netnsInode(); ino == 0 || !inNetNS(os.Getpid(), ino) {
		return fmt.Errorf("AddNode must run inside network namespace %s", NetNS)
	}
	n := secondNode()
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"network", func(context.Context) error { return createSecondNetwork() }},
		{"mount namespace", func(context.Context) error { return createSecondMountNS() }},
		{"cgroups", func(context.Context) error { return createSecondCgroups() }},
		{"containerd", func(ctx context.Context) error { return u.startContainerdOn(ctx, n) }},
		{"images", func(ctx context.Context) error {
			if err := u.buildImages(); err != nil {
				return err
			}
			return u.importImagesInto(ctx, n)
		}},
		{"systemd user manager", func(ctx context.Context) error { return u.startSystemdOn(ctx, n) }},
		{"kubelet", func(ctx context.Context) error { return u.startKubeletOn(ctx, n) }},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("second node: %s: %w", s.name, err)
		}
		u.logf("second node: %s ready (%.1fs)", s.name, time.Since(t).Seconds())
	}
	return nil
}

// createSecondNetwork creates SecondNodeNetNS: loopback, the veth to NetNS carrying
// SecondNodeIP with the default route through NetNS, forwarding (its pods reach the control
// plane through it), the route in NetNS to its pod range, and the DNAT of the `kubernetes`
// Service. Nothing outside the two namespaces changes.
func createSecondNetwork() error {
	b := SecondNodeNetNS
	steps := [][]string{
		{"ip", "netns", "add", b},
		{"ip", "-n", b, "link", "set", "lo", "up"},
		{"ip", "-n", NetNS, "link", "add", vethToSecond, "type", "veth", "peer", "name", vethOfSecond, "netns", b},
		{"ip", "-n", NetNS, "addr", "add", secondGateway + "/24", "dev", vethToSecond},
		{"ip", "-n", NetNS, "link", "set", vethToSecond, "up"},
		{"ip", "-n", b, "addr", "add", SecondNodeIP + "/24", "dev", vethOfSecond},
		{"ip", "-n", b, "link", "set", vethOfSecond, "up"},
		{"ip", "-n", b, "route", "add", "default", "via", secondGateway},
		{"ip", "-n", NetNS, "route", "add", secondPodCIDR, "via", SecondNodeIP},
		{"nsenter", "--net=/run/netns/" + b, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		steps = append(steps, append([]string{"nsenter", "--net=/run/netns/" + b, "iptables", "-t", "nat", "-A", chain}, kubernetesDNATRule...))
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// createSecondMountNS creates the second node's mount namespace, kept by a bind mount at
// secondMountNS (on a private mount, as the kernel requires), and binds the node's own
// directories in it.
func createSecondMountNS() error {
	for _, d := range []string{secondNSDir, secondData, secondRun} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := run("mount", "--bind", secondNSDir, secondNSDir); err != nil {
		return err
	}
	if err := run("mount", "--make-private", secondNSDir); err != nil {
		return err
	}
	if err := os.WriteFile(secondMountNS, nil, 0o600); err != nil {
		return err
	}
	// A slave: the host's mounts and unmounts reach it, its own stay its own.
	if err := run("unshare", "--mount="+secondMountNS, "--propagation", "slave", "true"); err != nil {
		return err
	}
	script := []string{"set -e"}
	for _, b := range secondBinds() {
		if err := os.MkdirAll(b[0], 0o755); err != nil { // the first node has them as a rule
			return err
		}
		if err := os.MkdirAll(b[1], 0o750); err != nil {
			return err
		}
		// What the host has mounted there (the first node's kubelet directory, with its pods'
		// volumes) goes first: a bind stacked on it would hide it, but containerd judges the
		// propagation of such a path by the lower mount.
		script = append(script, fmt.Sprintf("! mountpoint -q %q || umount -l %q", b[0], b[0]), fmt.Sprintf("mount --bind %q %q", b[1], b[0]))
	}
	// Mounts below its kubelet directory must reach its containers and its units' namespace.
	script = append(script, fmt.Sprintf("mount --make-rshared %q", KubeletDir))
	return run("nsenter", "--mount="+secondMountNS, "--", "sh", "-c", strings.Join(script, "\n"))
}

// cgroupHierarchies are the cgroup file systems mounted below /sys/fs/cgroup (v1 controllers,
// the named systemd one and the unified one of a hybrid host; just the root on a v2 host).
func cgroupHierarchies() []string {
	if exists("/sys/fs/cgroup/cgroup.controllers") {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// createSecondCgroups creates the second kubelet's cgroupRoot in every hierarchy (kubelet
// refuses a missing one), with the machine's CPUs and memory nodes in cpuset.
func createSecondCgroups() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, secondCgroupNS)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil && !exists("/sys/fs/cgroup/cgroup.controllers") {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// StopNode stops the second node for good, as a machine that is switched off and never comes
// back: every process of it is killed at once with SIGKILL (kubelet, containerd, every
// container, the user manager and its units), its mount namespace goes (with every mount in
// it), then its network namespace and cgroups. Its Node object stays (the control plane only
// sees a node that stopped answering); the caller deletes it as a node's decommissioning would.
// Its directories stay for the logs; Down removes them. It is a no-op when the node is not up.
func StopNode(log io.Writer) error {
	st, err := LoadState()
	if err != nil {
		return err
	}
	n := secondNode()
	ino := nsInode(filepath.Join("/run/netns", SecondNodeNetNS))
	cg := []byte("/" + secondCgroupNS + "/")
	victims := processesWhere(func(pid int) bool {
		return !isZombie(pid) && ((ino != 0 && inNetNS(pid, ino)) || inCgroupPath(pid, cg))
	})
	killAll(victims)
	var kept []Process
	for _, p := range st.Processes {
		if !strings.HasSuffix(p.Name, n.suffix) {
			kept = append(kept, p)
		}
	}
	st.Processes = kept
	if err := st.save(); err != nil {
		return err
	}
	var errs []error
	for _, m := range []string{secondMountNS, secondNSDir} {
		if isMountPoint(m) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	if exists(filepath.Join("/run/netns", SecondNodeNetNS)) {
		if err := run("ip", "netns", "delete", SecondNodeNetNS); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeCgroupTrees(secondCgroupNS))
	if log != nil {
		fmt.Fprintf(log, "[rig] second node stopped: %d processes killed\n", len(victims))
	}
	return errors.Join(errs...)
}

// nsInode is the inode of a namespace file (0 when it does not exist).
func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}
