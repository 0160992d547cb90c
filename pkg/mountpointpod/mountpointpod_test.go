//go:build linux

package mountpointpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
)

// The test binary doubles as a fake mount-s3: Run starts it with exactly the environment the
// test sends, and FAKE_MOUNT_S3 selects what it does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_MOUNT_S3"); mode != "" {
		os.Exit(fakeMountS3(mode))
	}
	os.Exit(m.Run())
}

// fakeReport is what the fake writes to $FAKE_REPORT (serve mode).
type fakeReport struct {
	Args        []string
	Env         []string
	Pid, Pgid   int
	FD3Device   string // "major:minor" of a character device, else ""
	FD3NonBlock bool
}

func fakeMountS3(mode string) int {
	switch mode {
	case "serve":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		r := fakeReport{Args: os.Args[1:], Env: os.Environ(), Pid: os.Getpid()}
		r.Pgid, _ = syscall.Getpgid(0)
		var st unix.Stat_t
		if unix.Fstat(3, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			r.FD3Device = fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if fl, err := unix.FcntlInt(3, unix.F_GETFL, 0); err == nil {
			r.FD3NonBlock = fl&unix.O_NONBLOCK != 0
		}
		b, _ := json.Marshal(r)
		_ = writeFileAtomic(os.Getenv("FAKE_REPORT"), b)
		fmt.Println("fake mount-s3: serving")
		if <-sigs == syscall.SIGUSR2 {
			fmt.Fprintln(os.Stderr, "Error: asked to fail")
			return 1
		}
		return 0
	case "fail":
		fmt.Fprint(os.Stderr, "Error: Failed to create S3 client\n\nCaused by:\n    bucket missing\n")
		return 1
	case "flood":
		for i := 0; i < 20000; i++ {
			fmt.Fprintf(os.Stderr, "log line %d\n", i)
		}
		fmt.Fprintln(os.Stderr, "Error: the end")
		return 2
	case "crash":
		fmt.Fprintln(os.Stderr, "about to crash")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "exit0":
		return 0
	}
	return 100
}

const testTimeout = 20 * time.Second

// syncBuffer is a bytes.Buffer safe for the concurrent writes of Run's output copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	t       *testing.T
	ctx     context.Context
	comm    string
	report  string
	signals chan os.Signal
	stdout  *syncBuffer
	stderr  *syncBuffer
	done    chan error
}

// start runs Run in the background with the test binary as mount-s3. Signals go through an
// unbuffered channel, so a send returns only once Run took the signal.
func start(t *testing.T, prepare func(comm string)) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", t.TempDir()) // the pod's own /tmp, where the cache goes
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	f := &fixture{
		t: t, ctx: ctx, comm: t.TempDir(), report: filepath.Join(t.TempDir(), "report.json"),
		signals: make(chan os.Signal), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1),
	}
	if prepare != nil {
		prepare(f.comm)
	}
	c := Config{CommDir: f.comm, MountS3Path: exe, Signals: f.signals, Stdout: f.stdout, Stderr: f.stderr}
	go func() { f.done <- Run(ctx, c) }()
	t.Cleanup(func() {
		cancel() // kills a fake still running
		if err := <-f.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("Run after cancel: %v", err)
		}
	})
	return f
}

func (f *fixture) path(name string) string { return filepath.Join(f.comm, name) }

// options are valid options for the fake in mode.
func (f *fixture) options(mode string) mountoptions.Options {
	return mountoptions.Options{
		BucketName: "bkt",
		Args:       []string{"--allow-delete", "--log-directory=/host/logs", "--cache=/host/cache"},
		// GORACE: a race-enabled fake would otherwise linger 1s at exit.
		Env: []string{"FAKE_MOUNT_S3=" + mode, "FAKE_REPORT=" + f.report, "AWS_REGION=us-east-1", "GORACE=atexit_sleep_ms=0"},
	}
}

// send hands o over with a fresh /dev/fuse descriptor (never mounted: the fake only looks at it).
func (f *fixture) send(o mountoptions.Options) error {
	f.t.Helper()
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		f.t.Skipf("needs /dev/fuse: %v", err)
	}
	defer fuse.Close()
	return mountoptions.Send(f.ctx, f.path(mountoptions.SocketName), o, int(fuse.Fd()))
}

func (f *fixture) result() error {
	f.t.Helper()
	select {
	case err := <-f.done:
		f.done <- err // for the cleanup
		return err
	case <-time.After(testTimeout):
		f.t.Fatalf("Run did not return within %v; stderr:\n%s", testTimeout, f.stderr.String())
		return nil
	}
}

func (f *fixture) requireRunning() {
	f.t.Helper()
	select {
	case err := <-f.done:
		f.done <- err
		f.t.Fatalf("Run returned %v, want it still running", err)
	default:
	}
}

// waitFor polls cond (test assertion only) until it holds.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; stderr:\n%s", what, f.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) readReport() fakeReport {
	f.t.Helper()
	f.waitFor("the fake mount-s3's report", func() bool { return exists(f.report) })
	b, err := os.ReadFile(f.report)
	if err != nil {
		f.t.Fatal(err)
	}
	var r fakeReport
	if err := json.Unmarshal(b, &r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) errorReport() (string, os.FileMode) {
	f.t.Helper()
	fi, err := os.Stat(f.path(mountoptions.ErrorFileName))
	if err != nil {
		f.t.Fatalf("no error report: %v", err)
	}
	b, _ := os.ReadFile(f.path(mountoptions.ErrorFileName))
	return string(b), fi.Mode().Perm()
}

func TestServeAndRetire(t *testing.T) {
	f := start(t, func(comm string) {
		if err := os.WriteFile(filepath.Join(comm, mountoptions.ErrorFileName), []byte("stale"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	o := f.options("serve")
	if err := f.send(o); err != nil {
		t.Fatalf("Send: %v", err)
	}
	// Acknowledged only after the stale error report was removed.
	if exists(f.path(mountoptions.ErrorFileName)) {
		t.Fatal("stale mount.err still there after the acknowledgement")
	}
	r := f.readReport()
	if len(r.Args) != 5 {
		t.Fatalf("mount-s3 args = %q", r.Args)
	}
	// --log-directory is dropped, --cache points into the pod, --foreground is added.
	cache := strings.TrimPrefix(r.Args[4], "--cache=")
	if diff := cmp.Diff([]string{"bkt", "/dev/fd/3", "--foreground", "--allow-delete", "--cache=" + cache}, r.Args); diff != "" || !exists(cache) || cache == "/host/cache" {
		t.Fatalf("mount-s3 args (-want +got):\n%s (cache %s exists: %v)", diff, cache, exists(cache))
	}
	if diff := cmp.Diff(o.Env, r.Env); diff != "" {
		t.Errorf("mount-s3 environment is not exactly the sent one (-sent +got):\n%s", diff)
	}
	if r.Pgid != r.Pid {
		t.Errorf("mount-s3 is in process group %d, want its own (%d)", r.Pgid, r.Pid)
	}
	if r.FD3Device != "10:229" || r.FD3NonBlock {
		t.Errorf("fd 3 is device %q (non-blocking: %v), want /dev/fuse (10:229) in blocking mode", r.FD3Device, r.FD3NonBlock)
	}
	if exists(f.path(mountoptions.SocketName)) {
		t.Error("still listening while serving")
	}
	f.waitFor("mount-s3's output", func() bool { return strings.Contains(f.stdout.String(), "fake mount-s3: serving") })

	// A termination signal while serving is ignored.
	f.signals <- syscall.SIGTERM
	f.signals <- syscall.SIGINT
	f.requireRunning()

	// The node retires the pod: mount.exit, then the unmount ends mount-s3 with status 0.
	if err := os.WriteFile(f.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r.Pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := f.result(); err != nil {
		t.Fatalf("Run = %v, want nil after a requested unmount", err)
	}
	if exists(cache) {
		t.Errorf("cache directory %s left behind", cache)
	}
	if exists(f.path(mountoptions.ErrorFileName)) {
		t.Error("mount.err written for a clean exit")
	}
}

func TestMountS3Failures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     string
		want     func(string) bool
		errSS    string
		inStderr string
	}{
		{"exit status", "fail", func(s string) bool {
			return s == "Error: Failed to create S3 client\n\nCaused by:\n    bucket missing\n"
		}, "exit status 1", "bucket missing"},
		{"bounded report", "flood", func(s string) bool {
			return len(s) <= MaxErrorReport+64 && strings.HasPrefix(s, "[earlier output dropped]\nlog line ") && strings.HasSuffix(s, "log line 19999\nError: the end\n")
		}, "exit status 2", "log line 0\n"},
		{"killed", "crash", func(s string) bool { return s == "about to crash\n(mount-s3 signal: killed)\n" }, "signal: killed", "about to crash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, nil)
			if err := f.send(f.options(tc.mode)); err != nil {
				t.Fatal(err)
			}
			err := f.result()
			if !errors.Is(err, ErrMountS3Failed) || !strings.Contains(err.Error(), tc.errSS) {
				t.Fatalf("Run = %v, want ErrMountS3Failed with %q", err, tc.errSS)
			}
			report, mode := f.errorReport()
			if !tc.want(report) || mode != 0o644 {
				t.Fatalf("mount.err (mode %v, %d bytes):\n%q", mode, len(report), report[max(0, len(report)-300):])
			}
			// The container log got the output too.
			if !strings.Contains(f.stderr.String(), tc.inStderr) {
				t.Errorf("stderr lacks mount-s3's output")
			}
		})
	}
}

func TestMountS3CannotStart(t *testing.T) {
	comm := t.TempDir()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	go func() { done <- Run(ctx, Config{CommDir: comm, MountS3Path: "/nonexistent/mount-s3"}) }()
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	defer fuse.Close()
	o := mountoptions.Options{BucketName: "bkt"}
	if err := mountoptions.Send(ctx, filepath.Join(comm, mountoptions.SocketName), o, int(fuse.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrMountS3Failed) {
		t.Fatalf("Run = %v, want ErrMountS3Failed", err)
	}
	b, _ := os.ReadFile(filepath.Join(comm, mountoptions.ErrorFileName))
	if !strings.Contains(string(b), "start mount-s3 (/nonexistent/mount-s3)") || !strings.Contains(string(b), "no such file") {
		t.Fatalf("mount.err = %q", b)
	}
}

func TestUnexpectedExit(t *testing.T) {
	f := start(t, nil)
	if err := f.send(f.options("exit0")); err != nil {
		t.Fatal(err)
	}
	if err := f.result(); !errors.Is(err, ErrUnexpectedExit) {
		t.Fatalf("Run = %v, want ErrUnexpectedExit", err)
	}
}

func TestFailureWhileServing(t *testing.T) {
	f := start(t, nil)
	if err := f.send(f.options("serve")); err != nil {
		t.Fatal(err)
	}
	r := f.readReport()
	if err := syscall.Kill(r.Pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if err := f.result(); !errors.Is(err, ErrMountS3Failed) {
		t.Fatalf("Run = %v", err)
	}
	if report, _ := f.errorReport(); report != "Error: asked to fail\n" {
		t.Fatalf("mount.err = %q", report)
	}
}

func TestStopWhileWaiting(t *testing.T) {
	t.Run("signal", func(t *testing.T) {
		f := start(t, nil)
		f.signals <- syscall.SIGTERM // taken only once Run waits for options
		if err := f.result(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if exists(f.path(mountoptions.SocketName)) {
			t.Error("socket left behind")
		}
	})
	t.Run("mount.exit appears", func(t *testing.T) {
		f := start(t, nil)
		f.waitFor("the socket", func() bool { return exists(f.path(mountoptions.SocketName)) })
		if err := os.WriteFile(f.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := f.result(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
	t.Run("mount.exit renamed into place", func(t *testing.T) {
		f := start(t, nil)
		f.waitFor("the socket", func() bool { return exists(f.path(mountoptions.SocketName)) })
		if err := writeFileAtomic(f.path(mountoptions.ExitFileName), nil); err != nil {
			t.Fatal(err)
		}
		if err := f.result(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
	t.Run("mount.exit before start", func(t *testing.T) {
		f := start(t, func(comm string) {
			if err := os.WriteFile(filepath.Join(comm, mountoptions.ExitFileName), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		})
		if err := f.result(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if exists(f.path(mountoptions.SocketName)) {
			t.Error("listened although retired")
		}
	})
}

// TestRefusedThenAccepted sends messages the mounter must refuse; each sender gets the reason
// and the mounter keeps waiting for a good one.
func TestRefusedThenAccepted(t *testing.T) {
	f := start(t, nil)
	good := f.options("serve")
	withArgs := func(args ...string) mountoptions.Options { o := good; o.Args = args; return o }
	for _, tc := range []struct {
		name  string
		o     mountoptions.Options
		fd    string
		errSS string
	}{
		{"foreground with a value", withArgs("--foreground=no"), "/dev/fuse", "takes no value"},
		{"short option", withArgs("-f"), "/dev/fuse", "not a long option"},
		{"end of options", withArgs("--", "--x"), "/dev/fuse", "would end"},
		{"help", withArgs("--help"), "/dev/fuse", "exit without mounting"},
		{"not the FUSE device", good, "/dev/null", "not /dev/fuse"},
	} {
		dev, err := os.OpenFile(tc.fd, os.O_RDWR, 0)
		if err != nil {
			t.Skipf("needs %s: %v", tc.fd, err)
		}
		err = mountoptions.Send(f.ctx, f.path(mountoptions.SocketName), tc.o, int(dev.Fd()))
		dev.Close()
		if !errors.Is(err, mountoptions.ErrRejected) || !strings.Contains(err.Error(), tc.errSS) {
			t.Fatalf("%s: Send = %v, want ErrRejected with %q", tc.name, err, tc.errSS)
		}
		f.requireRunning()
	}
	if err := f.send(good); err != nil {
		t.Fatalf("good message after refusals: %v", err)
	}
	r := f.readReport()
	if err := os.WriteFile(f.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(r.Pid, syscall.SIGUSR1)
	if err := f.result(); err != nil {
		t.Fatal(err)
	}
}
