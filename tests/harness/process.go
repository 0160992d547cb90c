package harness

import (
	"os"
	"os/exec"
	"path/filepath"
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
