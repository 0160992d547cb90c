package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemonEnv marks the re-executed child of a daemonising mount-s3; its value is the number of
// the inherited status-pipe fd. The child removes it from its environment at once.
const daemonEnv = "MOUNTS3_STANDIN_DAEMON_FD"

// readyTimeout bounds how long the parent waits for the child, as mount-s3 does.
const readyTimeout = 30 * time.Second

// daemonize is the parent half of background mode (no --foreground). Go cannot fork, so it
// re-executes this binary with the same arguments, daemonEnv set and the write end of a pipe
// as fd 3 (above the FUSE descriptor of a "/dev/fd/N" mount point, which keeps its number); the child runs in a new session with stdin and stdout on /dev/null and this
// process's stderr. The child writes "0" once the mount is ready, or "1" followed by the
// error text. The parent then exits 0 (printing "... is mounted at ...") or prints the error
// and exits 1; without an answer within readyTimeout it SIGTERMs the child and exits 1.
func daemonize(args []string, stdout, stderr io.Writer) int {
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
		return fail("Failed to create a pipe: %v", err)
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return fail("Failed to open %s: %v", os.DevNull, err)
	}
	defer devnull.Close()
	cmd := exec.Command(exe, args...)
	// mount-s3 forks, so its child keeps every descriptor it inherited at the same number: a
	// handed-over FUSE connection ("/dev/fd/N") stays at N, the status pipe goes above it.
	cmd.ExtraFiles = []*os.File{w}
	if o, err := parseArgs(args); err == nil {
		if n, ok := parseFuseFD(o.MountPoint); ok && n >= 3 {
			cmd.ExtraFiles = make([]*os.File, n-3+2)
			cmd.ExtraFiles[n-3] = os.NewFile(uintptr(n), "fuse")
			cmd.ExtraFiles[n-3+1] = w
		}
	}
	cmd.Env = append(os.Environ(), daemonEnv+"="+strconv.Itoa(3+len(cmd.ExtraFiles)-1))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fail("Failed to fork mount process: %v", err)
	}
	status := make(chan []byte, 1)
	go func() {
		b := make([]byte, 1)
		if n, _ := r.Read(b); n == 1 && b[0] == '0' {
			status <- b
			return
		}
		rest, _ := io.ReadAll(r)
		status <- append(b[:1], rest...)
	}()
	select {
	case b := <-status:
		if b[0] == '0' {
			_ = cmd.Process.Release()
			bucketOK(stdout, args)
			return 0
		}
		_ = cmd.Wait()
		if msg := strings.TrimSpace(string(b[1:])); msg != "" {
			fmt.Fprintf(stderr, "Error: %s\n", msg)
		}
		return fail("Failed to create mount process")
	case <-time.After(readyTimeout):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return fail("Timeout after %d seconds while waiting for mount process to be ready", int(readyTimeout/time.Second))
	}
}

// bucketOK prints mount-s3's success line for the parsed arguments.
func bucketOK(stdout io.Writer, args []string) {
	if o, err := parseArgs(args); err == nil {
		fmt.Fprintf(stdout, "%s is mounted at %s\n", describeBucket(o), o.MountPoint)
	}
}

// daemonChild is the child half: it takes the status pipe from daemonEnv (removing the
// variable), mounts, reports the outcome over the pipe, and serves until unmounted. Once the
// mount is ready, a stderr that is a pipe is replaced by /dev/null (the real mount-s3 closes
// its standard streams at that point), so a caller reading our output to EOF is not held up
// for the life of the mount; a stderr that is a file, socket (journald) or tty is kept.
func daemonChild(o *Options, fdText string, sigs <-chan os.Signal) int {
	os.Unsetenv(daemonEnv)
	fd, err := strconv.Atoi(fdText)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: bad %s=%q\n", daemonEnv, fdText)
		return 1
	}
	syscall.CloseOnExec(fd)
	pipe := os.NewFile(uintptr(fd), "status-pipe")
	log := newLogger(o, os.Stdout)
	m, err := mount(o, log)
	if err != nil {
		fmt.Fprintf(pipe, "1%v", err)
		pipe.Close()
		return 1
	}
	return serve(m, log, sigs, func() {
		_, _ = pipe.Write([]byte("0"))
		pipe.Close()
		var st unix.Stat_t
		if unix.Fstat(2, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
				_ = unix.Dup2(int(null.Fd()), 2)
				null.Close()
			}
		}
	})
}
