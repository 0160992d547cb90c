package harness

import (
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

// Process is a project binary (from bin/) running in the background with a clean environment
// and its output in a log file. It is stopped in t.Cleanup.
type Process struct {
	Name    string
	Args    []string
	Env     []string
	LogFile string
	// Path overrides bin/<Name> as the program to run.
	Path string

	t    TB
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts bin/<name> with args and env (nothing inherited).
func StartProcess(t TB, name string, args, env []string) *Process {
	t.Helper()
	p := &Process{Name: name, Args: args, Env: env, LogFile: filepath.Join(t.TempDir(), name+".log"), t: t}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start starts the process (again, after Stop or Kill), appending to the same log.
func (p *Process) Start() {
	p.t.Helper()
	log, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("%s log: %v", p.Name, err)
	}
	defer log.Close()
	path := p.Path
	if path == "" {
		path = Bin(p.t, p.Name)
	}
	cmd := exec.Command(path, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = log, log
	// A test binary that crashes must not leave its components running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
}

// Running reports whether the process is still alive.
func (p *Process) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid returns the process id (0 when not running).
func (p *Process) Pid() int {
	if !p.Running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited returns a channel closed when the process exits.
func (p *Process) Exited() <-chan struct{} { return p.done }

// ExitCode returns the exit code of a process that has exited (-1 when killed by a signal or
// still running).
func (p *Process) ExitCode() int {
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Stop sends SIGTERM and waits (SIGKILL after 10 s). Calling it when stopped is fine.
func (p *Process) Stop() { p.signal(syscall.SIGTERM) }

// Signal sends sig without waiting.
func (p *Process) Signal(sig syscall.Signal) {
	if p.Running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill kills the process abruptly.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

func (p *Process) signal(sig syscall.Signal) {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Log returns what the process printed so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogFile)
	return string(b)
}

// MountS3PIDs returns the processes of mount-s3 (the stand-in, in either mode: a systemd
// unit's or a Mountpoint Pod's) that have bucket as an argument of their command line.
func MountS3PIDs(bucket string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 2 && filepath.Base(args[0]) == "mount-s3" && slices.Contains(args[1:], bucket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// StatfsWithin returns the result of a statfs of path (which reaches mount-s3 on its mount), or
// an error when it does not answer within d (the call is left running).
func StatfsWithin(path string, d time.Duration) error {
	done := make(chan error, 1)
	go func() { var st syscall.Statfs_t; done <- syscall.Statfs(path, &st) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("statfs %s did not answer within %v", path, d)
	}
}
