package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Systemd is a real `systemd --user` manager running as root in its own mount namespace, in
// which SharedDir is a shared mount: FUSE mounts made by its units under SharedDir are visible
// to the test process and unmounts propagate both ways.
type Systemd struct {
	// Socket is the manager's private D-Bus socket (what the driver's --systemd-socket points at).
	Socket string
	// RuntimeDir is the manager's XDG_RUNTIME_DIR.
	RuntimeDir string
	// SharedDir is the directory made a shared mount.
	SharedDir string
	// EtcDir is the manager's /etc: a copy of this machine's, made at start, that its units
	// (systemd-sysusers among them) may change.
	EtcDir string

	t       TB
	env     []string
	cmd     *exec.Cmd
	logFile string
	done    chan struct{}
	// cgroupProcs are the cgroup.procs files of the manager's own cgroups (ownCgroups).
	cgroupProcs []string
}

// StartSystemd makes sharedDir a shared mount (bind-mounting it onto itself first when it is not
// a mount point) and starts a user manager in a private mount namespace with a clean
// environment plus extraEnv (KEY=VALUE; units inherit the manager's environment, so tests use
// this to prove the driver shields mount-s3 from it). It waits until the manager answers on its
// private socket and stops it (and undoes the bind mount) in t.Cleanup.
func StartSystemd(t TB, sharedDir string, extraEnv ...string) *Systemd {
	t.Helper()
	if err := os.MkdirAll(sharedDir, 0o755); err != nil {
		t.Fatalf("create shared dir: %v", err)
	}
	if err := exec.Command("mountpoint", "-q", sharedDir).Run(); err != nil {
		run(t, "mount", "--bind", sharedDir, sharedDir)
		t.Cleanup(func() {
			// Lazy: a test that failed may leave mounts below; they go with it.
			_ = exec.Command("umount", "-l", sharedDir).Run()
		})
	}
	run(t, "mount", "--make-shared", sharedDir)
	if err := os.MkdirAll("/run/systemd", 0o755); err != nil {
		t.Fatalf("create /run/systemd: %v", err)
	}
	runtimeDir, err := os.MkdirTemp("", "xdg-")
	if err != nil {
		t.Fatalf("runtime dir: %v", err)
	}
	if err := os.Chmod(runtimeDir, 0o700); err != nil {
		t.Fatalf("chmod runtime dir: %v", err)
	}
	s := &Systemd{
		Socket:     filepath.Join(runtimeDir, "systemd", "private"),
		RuntimeDir: runtimeDir,
		SharedDir:  sharedDir,
		t:          t,
		logFile:    filepath.Join(t.TempDir(), "systemd.log"),
		env:        extraEnv,
		EtcDir:     filepath.Join(t.TempDir(), "etc"),
	}
	// cp -a keeps owners and modes (/etc/shadow stays root's); the copy is a few MB.
	run(t, "cp", "-a", "/etc", s.EtcDir)
	var removeCgroups func()
	s.cgroupProcs, removeCgroups = ownCgroups(filepath.Base(runtimeDir))
	s.start()
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		os.RemoveAll(runtimeDir)
		removeCgroups()
	})
	return s
}

// ownCgroups makes the manager a cgroup of its own, at the root of each cgroup hierarchy
// systemd uses (the unified one, and the named "systemd" v1 one of a hybrid layout), and returns
// their cgroup.procs files and a function removing them. A user manager takes the cgroup it
// starts in as the root of its tree and creates and removes sub-cgroups there (app.slice,
// init.scope, one per unit); managers of tests running side by side would otherwise share the
// test process's cgroup and remove each other's: a unit whose cgroup just went fails with
// 219/CGROUP before its first command runs (seen as units failing with no output). Where no
// hierarchy can be written, the manager runs where it is.
func ownCgroups(name string) ([]string, func()) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, func() {}
	}
	var procs, dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		if systemdV1 := f[2] == "cgroup" && slices.Contains(strings.Split(f[3], ","), "name=systemd"); f[2] != "cgroup2" && !systemdV1 {
			continue
		}
		dir := filepath.Join(f[1], "s3csi-test-"+name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		dirs = append(dirs, dir)
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	return procs, func() {
		for _, dir := range dirs {
			removeCgroupTree(dir)
		}
	}
}

// removeCgroupTree removes a cgroup and its children, deepest first (best effort: a cgroup
// still holding a process stays).
func removeCgroupTree(dir string) {
	var all []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			all = append(all, p)
		}
		return nil
	})
	for i := len(all) - 1; i >= 0; i-- {
		_ = os.Remove(all[i])
	}
}

func (s *Systemd) start() {
	s.t.Helper()
	_ = os.Remove(s.Socket)
	log, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("systemd log: %v", err)
	}
	defer log.Close()
	// The manager sees a copy of /etc (EtcDir), so that the user the driver creates for mount-s3
	// (--mount-s3-user) is added to the copy and never to this machine's /etc/passwd.
	// In that fresh /run/systemd, the nodes a node's PID 1 makes at boot in
	// /run/systemd/inaccessible: a manager running as root mounts them over what a unit must not
	// reach (ProtectHome, ProtectKernelLogs, InaccessiblePaths), and fails such a unit (226/NAMESPACE)
	// without them.
	inaccessible := "mkdir -p /run/systemd/inaccessible && cd /run/systemd/inaccessible && mkdir -m 0 dir && touch reg && chmod 0 reg && mknod -m 0 chr c 0 0 && mknod -m 0 blk b 0 0 && mkfifo -m 0 fifo && cd /"
	script := fmt.Sprintf("mount --bind %s /etc && mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system && %s && exec /lib/systemd/systemd --user", s.EtcDir, inaccessible)
	for _, p := range s.cgroupProcs {
		script = fmt.Sprintf("echo $$ > %s && %s", p, script)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "unchanged", "sh", "-c", script)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "XDG_RUNTIME_DIR=" + s.RuntimeDir, "LANG=C.UTF-8"}, s.env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a crashed test
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start systemd --user: %v", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// is-system-running answers "offline" for a user manager without a system bus; the
		// manager's own SystemState is what counts.
		if _, err := os.Stat(s.Socket); err == nil {
			if out, err := s.systemctl("show", "--property=SystemState", "--value"); err == nil {
				if st := strings.TrimSpace(out); st == "running" || st == "degraded" {
					return
				}
			}
		}
		select {
		case <-s.done:
			s.t.Fatalf("systemd --user exited early:\n%s", s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.t.Fatalf("systemd --user not ready after 20s:\n%s", s.Log())
}

func (s *Systemd) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Stop stops the manager with sig and waits for it to exit: SIGTERM stops every unit it runs
// first (their processes get SIGTERM), SIGKILL leaves their processes orphaned. Start brings a
// fresh manager up on the same socket.
func (s *Systemd) Stop(sig syscall.Signal) { s.stop(sig) }

// PID is the manager's process id (while it runs).
func (s *Systemd) PID() int { return s.cmd.Process.Pid }

// Signal sends sig to the manager (SIGSTOP: a manager that accepts connections and never
// answers; SIGCONT resumes it).
func (s *Systemd) Signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("systemd is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal systemd: %v", err)
	}
}

// Start starts the manager again after Stop.
func (s *Systemd) Start() {
	s.t.Helper()
	s.start()
}

// Restart kills the manager abruptly (SIGKILL, so the driver's D-Bus connection drops without
// a goodbye) and starts a fresh one on the same socket. Processes the old manager started are
// orphaned, like after a crash; their mounts stay.
func (s *Systemd) Restart() {
	s.t.Helper()
	s.stop(syscall.SIGKILL)
	s.start()
}

// RunUnit starts a transient unit on this manager with systemd-run (as another program would:
// the Scality driver 1.x in upgrade tests): properties are systemd-run -p values, env the
// unit's environment. It waits for the start job.
func (s *Systemd) RunUnit(name string, props, env []string, argv ...string) {
	s.t.Helper()
	if out, err := s.runUnit(name, true, props, env, argv...); err != nil {
		s.t.Fatalf("systemd-run %s: %v\n%s", name, err, out)
	}
}

// RunUnitUncollected is RunUnit for a unit that may fail: it stays loaded after it ends, as
// the 1.x driver's units do (no CollectMode), and its start's error is returned.
func (s *Systemd) RunUnitUncollected(name string, props, env []string, argv ...string) error {
	s.t.Helper()
	_, err := s.runUnit(name, false, props, env, argv...)
	return err
}

func (s *Systemd) runUnit(name string, collect bool, props, env []string, argv ...string) ([]byte, error) {
	args := []string{"--user", "--unit=" + name}
	if collect {
		args = append(args, "--collect")
	}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	for _, e := range env {
		args = append(args, "--setenv="+e)
	}
	cmd := exec.Command("systemd-run", append(args, argv...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR=" + s.RuntimeDir}
	return cmd.CombinedOutput()
}

// Systemctl runs `systemctl --user ARGS...` against this manager and returns its combined output.
func (s *Systemd) Systemctl(args ...string) (string, error) { return s.systemctl(args...) }

func (s *Systemd) systemctl(args ...string) (string, error) {
	cmd := exec.Command("systemctl", append([]string{"--user"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR=" + s.RuntimeDir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Units lists the loaded units whose names match pattern (e.g. "mount-s3-*").
func (s *Systemd) Units(pattern string) []string {
	s.t.Helper()
	out, err := s.systemctl("list-units", "--all", "--plain", "--no-legend", pattern)
	if err != nil {
		s.t.Fatalf("systemctl list-units: %v\n%s", err, out)
	}
	var units []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			units = append(units, f[0])
		}
	}
	return units
}

// Log returns what the manager printed.
func (s *Systemd) Log() string {
	b, _ := os.ReadFile(s.logFile)
	return string(b)
}

func run(t TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// ErrNotRoot is returned by RequireRoot's check.
var ErrNotRoot = errors.New("the real-component suites need root (mounts, FUSE, systemd)")

// RequireRoot fails the test unless it runs as root: these suites mount filesystems.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%v", fmt.Errorf("%w; run `sudo make test`", ErrNotRoot))
	}
}

// UserIDs returns the uid and gid of name in the manager's /etc (EtcDir), failing the test when
// the user is not there.
func (s *Systemd) UserIDs(t TB, name string) (int, int) {
	t.Helper()
	return PasswdIDs(t, s.EtcDir, name)
}

// PasswdIDs returns the uid and gid of name in etcDir/passwd, failing the test when the user is
// not there.
func PasswdIDs(t TB, etcDir, name string) (int, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(etcDir, "passwd"))
	if err != nil {
		t.Fatalf("passwd: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[0] == name {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("passwd line %q", line)
			}
			return uid, gid
		}
	}
	t.Fatalf("user %s is not in %s/passwd", name, etcDir)
	return 0, 0
}
