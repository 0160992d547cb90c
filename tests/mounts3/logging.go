package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// logger writes mount-s3's log, one line per significant event (CONFORMANCE.md, rows L1-L5).
// It never receives credentials. A nil or disabled logger drops everything.
type logger struct {
	mu    sync.Mutex
	w     io.Writer // nil: logging disabled
	debug bool
}

func (l *logger) printf(format string, args ...any) {
	if l == nil || l.w == nil {
		return
	}
	line := fmt.Sprintf("%s mount-s3[%d]: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), strings.TrimSpace(fmt.Sprintf(format, args...)))
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, line)
}

func (l *logger) debugf(format string, args ...any) {
	if l == nil {
		return
	}
	l.mu.Lock()
	on := l.debug
	l.mu.Unlock()
	if on {
		l.printf(format, args...)
	}
}

// logFileEnv carries the log file name from a daemonising parent to its child: mount-s3
// names the file before it forks, so both write the same one.
const logFileEnv = "MOUNTS3_STANDIN_LOG_FILE"

// logFileName is mount-s3's prepare_log_file_name (awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3-fs/src/logging.rs): mountpoint-s3-<UTC %Y-%m-%dT%H-%M-%SZ>.<6 random
// alphanumerics>.log in the log directory.
func logFileName(dir string) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return filepath.Join(dir, "mountpoint-s3-"+time.Now().UTC().Format("2006-01-02T15-04-05Z")+"."+string(b)+".log")
}

// syslogAddr is where syslog is reached ("": the system's socket). Tests point it at their own.
var syslogAddr = ""

// newLogger is mount-s3's init_logging (logging.rs, init_tracing_subscriber; cli.rs,
// make_logging_config): nothing when the filter is off (--no-log, unless MOUNTPOINT_LOG is
// set, which overrides every flag); with a log file (--log-directory), that file, made with
// its directory (0750, file 0640, appended to); otherwise syslog (facility user, tag
// mount-s3) when its socket answers; and standard output as well in the foreground.
// MOUNTPOINT_LOG is modelled coarsely: "off" disables, a value naming debug or trace enables
// the debug lines, anything else logs as by default (its filter syntax is not modelled). An
// enabled logger cycles --debug on SIGUSR2, as mount-s3 cycles its filters.
func newLogger(o *Options, stdout io.Writer, logFile string) (*logger, error) {
	l := &logger{debug: o.Debug}
	env, envSet := os.LookupEnv("MOUNTPOINT_LOG")
	switch {
	case envSet && env != "":
		if strings.TrimSpace(env) == "off" {
			defaultAction(unix.SIGUSR2)
			return l, nil
		}
		l.debug = strings.Contains(env, "debug") || strings.Contains(env, "trace")
	case o.NoLog:
		defaultAction(unix.SIGUSR2)
		return l, nil
	}
	var ws []io.Writer
	if logFile != "" {
		if err := os.MkdirAll(filepath.Dir(logFile), 0o750); err != nil {
			return nil, chainError{"failed to initialize logging", "failed to create log folder", rustIOErr(err)}
		}
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o640)
		if err != nil {
			return nil, chainError{"failed to initialize logging", "failed to create log file", rustIOErr(err)}
		}
		ws = append(ws, f)
	} else if w, err := dialSyslog(); err == nil {
		ws = append(ws, w)
	}
	if o.Foreground {
		ws = append(ws, stdout)
	}
	if len(ws) > 0 {
		l.w = io.MultiWriter(ws...)
	}
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, unix.SIGUSR2)
	go func() {
		for range usr2 {
			l.mu.Lock()
			l.debug = !l.debug
			l.mu.Unlock()
		}
	}()
	return l, nil
}

// dialSyslog opens mount-s3's syslog writer: facility LOG_USER, process name mount-s3
// (logging/syslog.rs, SyslogLayer::formatter).
func dialSyslog() (io.Writer, error) {
	if syslogAddr != "" {
		return syslog.Dial("unixgram", syslogAddr, syslog.LOG_USER|syslog.LOG_INFO, "mount-s3")
	}
	return syslog.New(syslog.LOG_USER|syslog.LOG_INFO, "mount-s3")
}

// defaultAction gives sig the kernel's default action (termination for SIGUSR1/SIGUSR2), as
// in a Rust program that installs no handler for it; Go's runtime would otherwise catch and
// ignore it.
func defaultAction(sig unix.Signal) {
	var sa struct {
		handler  uintptr // SIG_DFL
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
}
