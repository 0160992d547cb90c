package rig

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type syscallStat = syscall.Stat_t

func stat(path string, st *syscall.Stat_t) error { return syscall.Stat(path, st) }

// baseEnv is the whole environment of every daemon: nothing is inherited (this machine sets
// AWS_* and CA variables that must not leak into the components under test).
var baseEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}

// daemon is a process the rig started and still waits for (to see an early exit).
type daemon struct {
	Process
	done chan struct{}
}

// startDaemon starts argv (with baseEnv plus env) in its own session, so it outlives the
// rigctl that started it, with its output in logDir/<name>.log, and records it in the state
// before returning.
func (u *upper) startDaemon(name string, argv []string, env ...string) (*daemon, error) {
	return u.startDaemonIn(nil, name, argv, env...)
}

// startDaemonIn is startDaemon on node n (nil: the first node, whose namespaces are this
// process's): argv runs in the node's namespaces, and its name gets the node's suffix. The
// recorded program is argv[0]'s (nsenter executes it in place, so the pid stays).
func (u *upper) startDaemonIn(n *node, name string, argv []string, env ...string) (*daemon, error) {
	if n != nil {
		name += n.suffix
	}
	logPath := filepath.Join(logDir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	exe, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.Command(exe, argv[1:]...)
	if n != nil && len(n.enter) > 0 {
		cmd = exec.Command(n.enter[0], append(append(n.enter[1:], exe), argv[1:]...)...)
	}
	cmd.Env = append(append([]string(nil), baseEnv...), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{Process: Process{Name: name, PID: cmd.Process.Pid, Exe: exe, Log: logPath}, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	u.state.Processes = append(u.state.Processes, d.Process)
	if err := u.state.save(); err != nil {
		return nil, err
	}
	u.daemons[name] = d
	return d, nil
}

// waitReady polls check every 100 ms until it returns nil, the daemon exits, or timeout
// passes; errors carry the end of the daemon's log.
func (d *daemon) waitReady(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("%s exited during start-up:\n%s", d.Name, Tail(d.Log, 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %v: %v\n%s", d.Name, timeout, last, Tail(d.Log, 40))
}

// Tail returns the last n lines of a file ("" when unreadable).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// alive reports whether pid runs exe (a recycled pid runs something else).
func alive(pid int, exe string) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	target = strings.TrimSuffix(target, " (deleted)")
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real // bin/k8s/etcd is a link to the system's etcd
	}
	return target == exe
}

// stopPID sends SIGTERM, waits up to grace, then SIGKILLs.
func stopPID(pid int, grace time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil || isZombie(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

func isZombie(pid int) bool {
	f := statFields(pid)
	return f == nil || f[0] == "Z"
}

// parentOf returns pid's parent (0 when unknown).
func parentOf(pid int) int {
	f := statFields(pid)
	if f == nil {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// statFields returns the fields of /proc/<pid>/stat after the program name (state, ppid, ...),
// nil when pid is gone or the file is short.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	if f := strings.Fields(s[i+1:]); len(f) >= 2 {
		return f
	}
	return nil
}

// processesWhere lists the pids (other than this process) for which match returns true.
func processesWhere(match func(pid int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		if match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// inNetNS reports whether pid lives in the network namespace with inode ino.
func inNetNS(pid int, ino uint64) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
		return false
	}
	return st.Ino == ino
}

// inKubepods reports whether pid runs in a cgroup kubelet made for pods.
func inKubepods(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && bytes.Contains(b, []byte("/kubepods"))
}

// inCgroupPath reports whether pid's cgroup path, in some hierarchy, contains part.
func inCgroupPath(pid int, part []byte) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && bytes.Contains(b, part)
}

// exeUnder reports whether pid's program lives below dir.
func exeUnder(pid int, dir string) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.HasPrefix(target, dir+"/")
}

// run runs a short command and returns its combined output as the error's text on failure.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
