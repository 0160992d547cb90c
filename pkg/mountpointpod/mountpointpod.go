package mountpointpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
)

// MaxErrorReport is how much of mount-s3's stderr (its end) is kept for mount.err.
const MaxErrorReport = 64 << 10

// outputDrain bounds how long Run waits for mount-s3's output pipe to close once mount-s3
// exited (a process it started might still hold it).
const outputDrain = 5 * time.Second

// ErrMountS3Failed is wrapped when mount-s3 exited non-zero, was killed, or could not start;
// mount.err then holds the reason.
var ErrMountS3Failed = errors.New("mount-s3 failed")

// ErrUnexpectedExit is returned when mount-s3 exited 0 although the node plugin did not ask
// for an unmount (no mount.exit).
var ErrUnexpectedExit = errors.New("mount-s3 exited without an unmount request")

// Config configures Run.
type Config struct {
	// CommDir is the directory shared with the node plugin (the pod's comm emptyDir).
	CommDir string
	// MountS3Path is the absolute path of the mount-s3 binary.
	MountS3Path string
	// Signals delivers the termination signals the process receives (SIGTERM, SIGINT): they
	// end the wait for options, and are ignored while mount-s3 serves. Nil: none.
	Signals <-chan os.Signal
	// MaxCacheMiB bounds mount-s3's --max-cache-size when a mount has a cache (0: no bound):
	// the size of the pod's cache volume, less room for mount-s3 to evict in time.
	MaxCacheMiB uint64
	// Stdout and Stderr receive mount-s3's output; nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
}

// Validate checks that the paths are absolute.
func (c Config) Validate() error {
	var errs []error
	if !filepath.IsAbs(c.CommDir) {
		errs = append(errs, fmt.Errorf("the comm directory must be an absolute path, not %q", c.CommDir))
	}
	if !filepath.IsAbs(c.MountS3Path) {
		errs = append(errs, fmt.Errorf("the mount-s3 path must be absolute, not %q", c.MountS3Path))
	}
	return errors.Join(errs...)
}

func (c Config) path(name string) string { return filepath.Join(c.CommDir, name) }

// Run is the whole life of a Mountpoint Pod, as described in the package comment: wait for
// one mount, serve it with mount-s3, and report how it ended. It returns nil when the pod
// should end Succeeded (retired, or terminated before it mounted anything), and an error
// when it should be restarted or cannot work (bad Config, comm directory unusable, socket path
// too long, mount-s3 failed). If ctx ends, Run returns ctx's error, killing mount-s3 if it
// runs; in the Mountpoint Pod ctx never ends (signals come through Config.Signals).
func Run(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	retire, err := watchFile(c.CommDir, mountoptions.ExitFileName)
	if err != nil {
		return err
	}
	defer retire.Close()
	if exists(c.path(mountoptions.ExitFileName)) {
		klog.InfoS("Unmount requested before anything was mounted, exiting", "file", c.path(mountoptions.ExitFileName))
		return nil
	}
	ln, err := mountoptions.Listen(c.path(mountoptions.SocketName))
	if err != nil {
		return err
	}
	defer ln.Close()
	klog.InfoS("Waiting for mount options", "socket", ln.Path())
	o, fuse, err := waitForOptions(ctx, c, ln, retire)
	if err != nil || fuse == nil {
		return err
	}
	ln.Close()
	retire.Close()
	return serve(ctx, c, o, fuse)
}

// errRetired is the cancellation cause when mount.exit appears while waiting.
var errRetired = errors.New("unmount requested")

// signalled is the cancellation cause when a termination signal arrives while waiting.
type signalled struct{ sig os.Signal }

func (s signalled) Error() string { return "received " + s.sig.String() }

// waitForOptions accepts connections until one brings acceptable options. It returns a nil
// file and a nil error when the pod is told to stop first (mount.exit or a signal).
func waitForOptions(ctx context.Context, c Config, ln *mountoptions.Listener, retire *fileWatch) (mountoptions.Options, *os.File, error) {
	waitCtx, cancel := context.WithCancelCause(ctx)
	waiterDone := make(chan struct{})
	defer func() {
		cancel(nil)
		<-waiterDone // from now on only serve receives signals
	}()
	go func() {
		defer close(waiterDone)
		select {
		case <-retire.appeared:
			cancel(errRetired)
		case s := <-c.Signals:
			cancel(signalled{s})
		case <-waitCtx.Done():
		}
	}()
	errFile := c.path(mountoptions.ErrorFileName)
	accept := func(o mountoptions.Options, f *os.File) error {
		if err := checkArgs(o.Args); err != nil {
			return err
		}
		if err := checkFUSE(f); err != nil {
			return err
		}
		// Before the acknowledgement: once Send returns, a mount.err is about this mount.
		if err := os.Remove(errFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the stale %s: %w", mountoptions.ErrorFileName, err)
		}
		return nil
	}
	for {
		o, f, err := ln.Accept(waitCtx, accept)
		if err == nil {
			klog.InfoS("Mount options accepted", "bucket", o.BucketName, "args", o.Args, "envKeys", o.EnvKeys())
			return o, f, nil
		}
		if waitCtx.Err() != nil {
			var sig signalled
			switch cause := context.Cause(waitCtx); {
			case errors.Is(cause, errRetired):
				klog.InfoS("Unmount requested before anything was mounted, exiting", "file", c.path(mountoptions.ExitFileName))
				return mountoptions.Options{}, nil, nil
			case errors.As(cause, &sig):
				klog.InfoS("Terminated while waiting for mount options, exiting", "signal", sig.sig.String())
				return mountoptions.Options{}, nil, nil
			}
			return mountoptions.Options{}, nil, ctx.Err()
		}
		if !errors.Is(err, mountoptions.ErrReceive) {
			return mountoptions.Options{}, nil, err
		}
		klog.ErrorS(err, "Refused a mount options message, waiting for the next one")
	}
}

// serve runs mount-s3 on the received descriptor until it exits, and reports the outcome.
func serve(ctx context.Context, c Config, o mountoptions.Options, fuse *os.File) (served error) {
	// Keep this copy of the descriptor until mount.err is written: as long as one copy is
	// open the FUSE connection lives, so the node plugin cannot see it die before the error
	// report exists.
	defer fuse.Close()
	errFile := c.path(mountoptions.ErrorFileName)
	args, cache, err := mountS3Args(o.Args, c.MaxCacheMiB)
	defer func() {
		// Kept for the restarted container after a failure (a repair keeps the cache); gone
		// with the pod otherwise.
		if cache != "" && served == nil {
			_ = os.RemoveAll(cache)
		}
	}()
	if err != nil {
		return report(errFile, err.Error(), err)
	}
	stdout, stderr := c.Stdout, c.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	errTail := newTail(MaxErrorReport)
	cmd := exec.Command(c.MountS3Path, append([]string{o.BucketName, "/dev/fd/3"}, args...)...)
	cmd.Env = append([]string{}, o.Env...) // never nil: nil would inherit this process's environment
	cmd.ExtraFiles = []*os.File{fuse}
	cmd.Stdout = childOutput(stdout)
	cmd.Stderr = teeTail{w: stderr, tail: errTail}
	cmd.WaitDelay = outputDrain
	cmd.SysProcAttr = childAttr()

	klog.InfoS("Starting mount-s3", "path", c.MountS3Path, "bucket", o.BucketName, "args", args, "envKeys", o.EnvKeys())
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked exits: pin the thread while mount-s3 runs.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return report(errFile, fmt.Sprintf("start mount-s3 (%s): %v", c.MountS3Path, err), err)
	}
	klog.InfoS("mount-s3 started", "pid", cmd.Process.Pid)

	var waitErr error
	for running := true; running; {
		select {
		case s := <-c.Signals:
			klog.InfoS("Ignoring signal: mount-s3 keeps serving until the node plugin unmounts the volume", "signal", s.String())
		case waitErr = <-exited:
			running = false
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			klog.InfoS("Killed mount-s3", "cause", ctx.Err(), "exit", <-exited)
			return ctx.Err()
		}
	}

	state := cmd.ProcessState
	if state != nil && state.Success() {
		if waitErr != nil {
			klog.ErrorS(waitErr, "mount-s3's output did not close")
		}
		if exists(c.path(mountoptions.ExitFileName)) {
			klog.InfoS("mount-s3 exited after the unmount request, exiting")
			return nil
		}
		klog.ErrorS(ErrUnexpectedExit, "mount-s3 exited 0 but no unmount was requested")
		return ErrUnexpectedExit
	}
	status := "ended"
	if state != nil {
		status = state.String() // "exit status 1", "signal: killed"
	}
	text := strings.TrimSpace(errTail.String())
	switch {
	case text == "":
		text = "mount-s3 " + status + " without printing an error"
	case state == nil || !state.Exited():
		text += "\n(mount-s3 " + status + ")"
	}
	return report(errFile, text, fmt.Errorf("%w: %s", ErrMountS3Failed, status))
}

// report writes text to mount.err for the node plugin and returns err wrapped in
// ErrMountS3Failed.
func report(errFile, text string, err error) error {
	if werr := writeFileAtomic(errFile, []byte(text+"\n")); werr != nil {
		klog.ErrorS(werr, "Cannot write the error report", "file", errFile)
	} else {
		klog.InfoS("Wrote the error report for the node plugin", "file", errFile)
	}
	if !errors.Is(err, ErrMountS3Failed) {
		err = fmt.Errorf("%w: %w", ErrMountS3Failed, err)
	}
	return err
}
