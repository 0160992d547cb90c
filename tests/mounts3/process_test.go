package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/s3csi/s3-csi-driver/tests/harness"
	"golang.org/x/sys/unix"
)

// Tests of mount-s3's process: daemonising, logs, signals and its unmount on exit.

// TestDaemonStaysInSession (row D1): the background child stays in its parent's session and
// process group (mount-s3 forks without setsid).
func TestDaemonStaysInSession(t *testing.T) {
	f := newFixture(t, "bkt-session")
	dir, pidFile := mountDir(t)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir)...)
	mySid, _ := unix.Getsid(0)
	if sid := procStatField(t, pid, 6); sid != fmt.Sprint(mySid) {
		t.Errorf("daemon child session %s, want the test's %d", sid, mySid)
	}
	if pgrp := procStatField(t, pid, 5); pgrp != fmt.Sprint(unix.Getpgrp()) {
		t.Errorf("daemon child process group %s, want the test's %d", pgrp, unix.Getpgrp())
	}
	unmountAndWait(t, dir, pid)
}

// TestDaemonClosesStandardStreams (row D4): once mounted, the background child has closed its
// standard input, output and error, whatever they were (here a file, as under systemd): none
// of fds 0-2 refers to what it was given any more.
func TestDaemonClosesStandardStreams(t *testing.T) {
	f := newFixture(t, "bkt-closefds")
	dir, pidFile := mountDir(t)
	out := filepath.Join(t.TempDir(), "unit.log")
	logf, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(standinBin, f.args(dir)...)
	cmd.Env = append(f.env.list(), "UNSTABLE_MOUNTPOINT_PID_FILE="+pidFile)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, logf, logf
	if err := cmd.Run(); err != nil {
		t.Fatalf("mount-s3: %v", err)
	}
	pid := readPid(pidFile)
	// The child closes them just after its "0", which lets the parent exit: wait a moment.
	still := func() (held []string) {
		for fd := range 3 {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
			if err == nil && (target == out || target == os.DevNull) {
				held = append(held, fmt.Sprintf("fd %d -> %s", fd, target))
			}
		}
		return held
	}
	for deadline := time.Now().Add(5 * time.Second); len(still()) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if held := still(); len(held) > 0 {
		t.Errorf("daemon child still holds its standard streams: %v", held)
	}
	unmountAndWait(t, dir, pid)
}

// TestParentTimeout (row D3): without an answer from the child within the timeout, the parent
// gives up (it then SIGTERMs the child and fails with the timeout message; the 30 s are not
// waited for here).
func TestParentTimeout(t *testing.T) {
	status := make(chan byte, 1)
	start := time.Now()
	if b := waitReady(status, 50*time.Millisecond); b != 0 || time.Since(start) < 50*time.Millisecond {
		t.Errorf("waitReady = %q after %v, want 0 after the timeout", b, time.Since(start))
	}
	status <- '0'
	if b := waitReady(status, time.Minute); b != '0' {
		t.Errorf("waitReady = %q, want the child's '0'", b)
	}
	if readyTimeout != 30*time.Second {
		t.Errorf("readyTimeout = %v, want mount-s3's 30 s", readyTimeout)
	}
}

// TestLogFile (row L1): --log-directory makes the directory (0750) and one file (0640) that
// the parent and the background child share, named mountpoint-s3-<UTC time>.<6
// alphanumerics>.log.
func TestLogFile(t *testing.T) {
	f := newFixture(t, "bkt-logfile")
	dir, pidFile := mountDir(t)
	logDir := filepath.Join(t.TempDir(), "a", "logs")
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir, "--log-directory", logDir)...)
	unmountAndWait(t, dir, pid)
	for _, d := range []string{logDir, filepath.Dir(logDir)} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o750 {
			t.Errorf("%s: %v, %v; want a directory 0750", d, st, err)
		}
	}
	entries, _ := os.ReadDir(logDir)
	if len(entries) != 1 {
		t.Fatalf("log directory holds %v, want one file for parent and child", entries)
	}
	name := entries[0].Name()
	if !regexp.MustCompile(`^mountpoint-s3-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ\.[A-Za-z0-9]{6}\.log$`).MatchString(name) {
		t.Errorf("log file %q, want mountpoint-s3-<UTC %%Y-%%m-%%dT%%H-%%M-%%SZ>.<6 alphanumerics>.log", name)
	}
	st, err := os.Stat(filepath.Join(logDir, name))
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("log file mode %v, %v; want 0640", st, err)
	}
	b, _ := os.ReadFile(filepath.Join(logDir, name))
	if !strings.Contains(string(b), "successfully mounted bucket bkt-logfile") {
		t.Errorf("log file lacks the child's lines:\n%s", b)
	}
}

// TestSyslogFacility (row L2): without a log file, logs go to syslog with facility user and
// the process name mount-s3.
func TestSyslogFacility(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	old := syslogAddr
	syslogAddr = sock
	defer func() { syslogAddr = old }()
	l, err := newLogger(&Options{}, io.Discard, "")
	if err != nil {
		t.Fatal(err)
	}
	l.printf("hello")
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if msg := string(buf[:n]); !strings.HasPrefix(msg, "<14>") || !strings.Contains(msg, "mount-s3[") {
		t.Errorf("syslog datagram %q, want priority <14> (facility user, info) and mount-s3[pid]", msg)
	}
}

// TestMountpointLogOverridesNoLog (row L4): MOUNTPOINT_LOG enables the log even with --no-log.
func TestMountpointLogOverridesNoLog(t *testing.T) {
	needFUSE(t)
	args := []string{"bkt", "/nonexistent/dir", "--foreground", "--no-log"}
	for _, c := range []struct {
		env  env
		logs bool
	}{{env{}, false}, {env{"MOUNTPOINT_LOG": "info"}, true}, {env{"MOUNTPOINT_LOG": "off"}, false}} {
		code, stdout, _ := runStandin(t, c.env, args...)
		if code != 1 || strings.Contains(stdout, "mount-s3 1.24.0") != c.logs {
			t.Errorf("%v: exit %d, stdout %q; want a log on stdout: %t", c.env, code, stdout, c.logs)
		}
	}
}

// TestSignalsOnceMounted (row S2): SIGHUP ends the session as SIGINT and SIGTERM do (unmount,
// exit 0); before the session exists a signal has its default action (here during a probe
// that gets no answer).
func TestSignalsOnceMounted(t *testing.T) {
	f := newFixture(t, "bkt-sighup")
	dir, _ := mountDir(t)
	cmd, wait, output := startForeground(t, f.env, nil, f.args(dir)...)
	waitServing(t, dir, output)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d after SIGHUP; output:\n%s", code, output())
	}
	if _, ok := mountEntry(dir); ok {
		t.Fatalf("%s still mounted after SIGHUP", dir)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	dir2, _ := mountDir(t)
	cmd, wait, output = startForeground(t, f.env, nil, f.bucket, dir2, "--endpoint-url", "http://"+silent.Addr().String(), "--force-path-style")
	if c, err := silent.Accept(); err == nil {
		defer c.Close()
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != -1 || !cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Errorf("exit %d (%v) after SIGTERM during start-up, want killed by the signal; output:\n%s", code, cmd.ProcessState, output())
	}
}

// TestAttempts (row X3): each request is tried AWS_MAX_ATTEMPTS times (0 counts as 1), then
// the probe fails; the default of 10 is checked in-process (TestRetryModel).
func TestAttempts(t *testing.T) {
	needFUSE(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts and hangs up: a transport error
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	for _, c := range []struct {
		env  string
		want int32
	}{{"0", 1}, {"1", 1}, {"3", 3}} {
		accepted.Store(0)
		dir, _ := mountDir(t)
		code, _, stderr := runStandin(t, env{"AWS_MAX_ATTEMPTS": c.env, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "HOME": t.TempDir()},
			"bkt", dir, "--foreground", "--endpoint-url", "http://"+ln.Addr().String(), "--force-path-style")
		if code != 1 || !strings.Contains(stderr, "initial ListObjectsV2 failed") || accepted.Load() != c.want {
			t.Errorf("AWS_MAX_ATTEMPTS=%s: exit %d, %d connections, stderr %q; want 1 after %d", c.env, code, accepted.Load(), stderr, c.want)
		}
	}
}

// TestRetryModel (rows X3, E4): 10 attempts unless AWS_MAX_ATTEMPTS parses as a usize, and
// full-jitter backoff of at most min(20 s, 500 ms x 2^n).
func TestRetryModel(t *testing.T) {
	for v, want := range map[string]int{"": 10, "x": 10, "-1": 10, "0": 1, "+4": 4, "7": 7} {
		if v == "" {
			os.Unsetenv("AWS_MAX_ATTEMPTS")
		} else {
			t.Setenv("AWS_MAX_ATTEMPTS", v)
		}
		if got := maxAttempts(); got != want {
			t.Errorf("AWS_MAX_ATTEMPTS=%q: %d attempts, want %d", v, got, want)
		}
	}
	for attempt := 1; attempt <= 12; attempt++ {
		ceiling := min(20*time.Second, 500*time.Millisecond<<(attempt-1))
		for range 50 {
			if d, _ := (fullJitter{}).BackoffDelay(attempt, nil); d < 0 || d >= ceiling {
				t.Fatalf("attempt %d: delay %v outside [0, %v)", attempt, d, ceiling)
			}
		}
	}
}

// TestSIGUSR2 (row L5): with logging on, SIGUSR2 cycles the log verbosity and mount-s3 keeps
// serving; with --no-log there is no handler and the signal's default action ends it.
func TestSIGUSR2(t *testing.T) {
	f := newFixture(t, "bkt-sigusr2")
	for _, noLog := range []bool{false, true} {
		dir, _ := mountDir(t)
		args := f.args(dir)
		if noLog {
			args = append(args, "--no-log")
		}
		cmd, wait, output := startForeground(t, f.env, nil, args...)
		if noLog { // nothing logged: the mount entry is all there is to wait for
			waitFor(t, "foreground mount", func() bool { _, ok := mountEntry(dir); return ok })
		} else {
			waitServing(t, dir, output)
		}
		if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		if noLog {
			if code := wait(); code != -1 {
				t.Errorf("--no-log: exit %d after SIGUSR2, want killed by it; output:\n%s", code, output())
			}
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			continue
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := os.ReadDir(dir); err != nil {
			t.Fatalf("readdir after SIGUSR2: %v; output:\n%s", err, output())
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := wait(); code != 0 {
			t.Fatalf("exit %d after SIGTERM; output:\n%s", code, output())
		}
	}
}

// TestTransportErrorsAsTheCRTReportsThem (rows X2, X3, E5): a failed probe without an answer
// ends in the CRT's error; a TLS failure (a bundle without the server's CA) is retried like
// any failure to connect, then reads "TLS (SSL) negotiation failed" (no word of certificates).
func TestTransportErrorsAsTheCRTReportsThem(t *testing.T) {
	needFUSE(t)
	base := env{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "HOME": t.TempDir()}
	dir, _ := mountDir(t)
	code, _, stderr := runStandin(t, env{"AWS_MAX_ATTEMPTS": "1"}.with(base), "bkt", dir, "--foreground", "--endpoint-url", "http://127.0.0.1:1", "--force-path-style")
	if want := "    1: Client error\n    2: Unknown CRT error\n    3: CRT error 1047: aws-c-io: AWS_IO_SOCKET_CONNECTION_REFUSED, socket connection refused.\n"; code != 1 || !strings.HasSuffix(stderr, want) {
		t.Errorf("connection refused: exit %d, stderr %q; want it to end with %q", code, stderr, want)
	}

	var handshakes atomic.Int32
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			handshakes.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	other := harness.UnrelatedCA(t)
	code, _, stderr = runStandin(t, env{"AWS_MAX_ATTEMPTS": "2"}.with(base), "bkt", dir, "--foreground", "--endpoint-url", srv.URL,
		"--force-path-style", "--ca-bundle", other)
	if want := "    3: CRT error 1029: aws-c-io: AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE, TLS (SSL) negotiation failed\n"; code != 1 || !strings.HasSuffix(stderr, want) {
		t.Errorf("wrong CA: exit %d, stderr %q; want it to end with %q", code, stderr, want)
	}
	if n := handshakes.Load(); n != 2 {
		t.Errorf("%d connections for a TLS failure with AWS_MAX_ATTEMPTS=2, want 2 (retried)", n)
	}
}

// TestUnknownHostNotRetried (row X3): a host name the resolver does not know fails at once,
// as aws-c-s3 does; other errors are left to the retryer.
func TestUnknownHostNotRetried(t *testing.T) {
	notFound := &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}
	if got := noRetryForBadNames.IsErrorRetryable(fmt.Errorf("send: %w", notFound)); got != aws.FalseTernary {
		t.Errorf("unknown host: %v, want not retried", got)
	}
	if got := noRetryForBadNames.IsErrorRetryable(&net.DNSError{Err: "timeout", IsTimeout: true}); got != aws.UnknownTernary {
		t.Errorf("DNS timeout: %v, want left to the retryer", got)
	}
	if got := crtError(notFound); got != "CRT error 1059: aws-c-io: AWS_IO_DNS_INVALID_NAME, Host name was invalid for dns resolution." {
		t.Errorf("crtError(unknown host) = %q", got)
	}
}
