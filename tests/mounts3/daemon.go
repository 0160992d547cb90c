package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemonEnv marks the re-executed child of a daemonising mount-s3; its value is the number of
// the inherited status-pipe fd. The child removes it from its environment at once.
const daemonEnv = "MOUNTS3_STANDIN_DAEMON_FD"

// readyTimeout bounds how long the parent waits for the child, as mount-s3 does.
const readyTimeout = 30 * time.Second

// daemonize is the parent half of background mode (no --foreground; awslabs/mountpoint-s3@
// 58817cab2:mountpoint-s3/src/run.rs, run; CONFORMANCE.md D1-D6). mount-s3 names its log file
// and forks; Go cannot fork, so this re-executes the binary with the same arguments, daemonEnv
// set and the write end of a pipe above the descriptors it inherited (a "/dev/fd/N" FUSE
// descriptor keeps its number, the standard streams are the child's too), in the same session
// and process group. The parent logs as the child does, then waits up to readyTimeout for one
// byte: "0" is success ("... is mounted at ...", exit 0); anything else, or the child's exit,
// makes it wait for the child (which has printed its own error) and fail with "Failed to
// create mount process"; no answer in time makes it SIGTERM the child and fail with the
// timeout message.
func daemonize(args []string, o *Options, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "Error: "+format+"\n", a...)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		return fail("Failed to fork mount process: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fail("Failed to create a pipe\n\nCaused by:\n    %s", rustIOErr(err))
	}
	defer r.Close()
	logFile := ""
	if o.LogDirectory != "" {
		logFile = logFileName(o.LogDirectory)
	}
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = []*os.File{w}
	if n, ok := parseFuseFD(o.MountPoint); ok && n >= 3 {
		cmd.ExtraFiles = make([]*os.File, n-3+2)
		cmd.ExtraFiles[n-3] = os.NewFile(uintptr(n), "fuse")
		cmd.ExtraFiles[n-3+1] = w
	}
	cmd.Env = append(os.Environ(), daemonEnv+"="+strconv.Itoa(3+len(cmd.ExtraFiles)-1), logFileEnv+"="+logFile)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inherited(os.Stdin), inherited(os.Stdout), inherited(os.Stderr)
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fail("Failed to fork mount process: %v", err)
	}
	log, err := newLogger(o, stdout, logFile)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	status := make(chan byte, 1)
	go func() {
		b := make([]byte, 1)
		if n, _ := io.ReadFull(r, b); n == 1 {
			status <- b[0]
			return
		}
		status <- '1' // EOF: the child is gone
	}()
	log.debugf("waiting up to %d seconds for child process to be ready", int(readyTimeout/time.Second))
	switch waitReady(status, readyTimeout) {
	case '0':
		_ = cmd.Process.Release()
		fmt.Fprintf(stdout, "%s is mounted at %s\n", describeBucket(o), o.MountPoint)
		return 0
	case 0:
		log.printf("ERROR timeout after %d seconds waiting for message from child process", int(readyTimeout/time.Second))
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return fail("Timeout after %d seconds while waiting for mount process to be ready", int(readyTimeout/time.Second))
	}
	_ = cmd.Wait()
	return fail("Failed to create mount process")
}

// waitReady returns the child's status byte, or 0 when none came within timeout.
func waitReady(status <-chan byte, timeout time.Duration) byte {
	select {
	case b := <-status:
		return b
	case <-time.After(timeout):
		return 0
	}
}

// inherited passes f on to the child at the same number when it is open (nil, i.e.
// /dev/null, when this process has no such descriptor).
func inherited(f *os.File) *os.File {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return nil
	}
	return f
}

// daemonChild is the child half: it takes the status pipe from daemonEnv (removing the
// variable), logs to the parent's log file or syslog, writes the PID file, mounts, and
// reports the outcome over the pipe. On failure it prints its own error (the parent's
// stderr is its own) and exits 1. Once mounted it writes "0" and closes its standard input,
// output and error (close, not a redirection: later descriptors may take those numbers),
// then serves until the session ends.
func daemonChild(o *Options, fdText string) int {
	os.Unsetenv(daemonEnv)
	logFile := os.Getenv(logFileEnv)
	os.Unsetenv(logFileEnv)
	fd, err := strconv.Atoi(fdText)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: bad %s=%q\n", daemonEnv, fdText)
		return 1
	}
	syscall.CloseOnExec(fd)
	pipe := os.NewFile(uintptr(fd), "status-pipe")
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		return 1
	}
	log, err := newLogger(o, os.Stdout, logFile)
	if err != nil {
		return fail(err)
	}
	if err := writePidFile(); err != nil {
		return fail(err)
	}
	m, err := mount(o, log, os.Stderr)
	if err != nil {
		_, _ = pipe.Write([]byte("1"))
		return fail(err)
	}
	return serve(m, log, func() {
		_, _ = pipe.Write([]byte("0"))
		pipe.Close()
		for fd := range 3 {
			_ = unix.Close(fd)
		}
	})
}
