package systemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
)

// The programs the mount units run are host paths (Config.MountS3Path, Config.FuseHelperPath):
// install-mp copies them to the host, and the node plugin's container does not see that
// directory (the chart mounts it into install-mp only). Only systemd sees what a unit will run,
// so CheckBinaries asks it: each program runs once, `<path> --version`, in a oneshot unit of its
// own, as the mount units would run it (mount-s3 in the sandbox, scality-fuse-helper with full
// privileges). Without that check a missing helper made every publish fail with
// "mount-s3 printed nothing" (systemd's exec failure goes to its journal, not to the unit's
// output file).

// Names of the programs the mount units run, as BinaryError.Binary reports them.
const (
	BinaryMountS3    = "mount-s3"
	BinaryFuseHelper = "scality-fuse-helper"
)

// checkUnitPrefix names the oneshot units of CheckBinaries (s3csi-check-mount-s3.service, …):
// not mount-s3-*, the pattern of the mount units and of the 1.x driver's.
const checkUnitPrefix = "s3csi-check-"

// checkTimeout bounds one program's `--version`.
const checkTimeout = 30 * time.Second

// exitExec is systemd's exit status of a unit whose program it could not execute
// (EXIT_EXEC, 203): no such file, not executable, or not a program for this machine.
const exitExec = 203

// BinaryError reports a program the mount units run that does not run on the host.
type BinaryError struct {
	// Binary is BinaryMountS3 or BinaryFuseHelper; Path is its host path.
	Binary, Path string
	// NotExecutable: systemd could not execute the path (status 203/EXEC).
	NotExecutable bool
	// Result is the check unit's result (exit-code, timeout, signal, …) and Status its main
	// process's exit status; Output is what the program printed (the tail).
	Result string
	Status int32
	Output string
}

func (e *BinaryError) Error() string {
	if e.NotExecutable {
		return fmt.Sprintf("%s (%s) is missing or not executable on the host (systemd could not execute it: status 203/EXEC)", e.Binary, e.Path)
	}
	return fmt.Sprintf("%s (%s) does not run on the host: %s --version ended %s (status %d): %s", e.Binary, e.Path, e.Path, e.Result, e.Status, orNothing(e.Output))
}

func orNothing(s string) string {
	if s == "" {
		return "(it printed nothing)"
	}
	return s
}

// CheckBinaries makes sure the programs new mount units will run are on the host and run:
// mount-s3, and scality-fuse-helper when the units use the descriptor hand-over (a helper is
// configured and systemd is 246 or later). It returns a *BinaryError for the first that does
// not run, another error when the check itself could not be made (systemd unreachable: the
// caller decides), nil otherwise. Each check is a oneshot unit that is gone when it returns.
func (m *Mounter) CheckBinaries(ctx context.Context) error {
	type program struct {
		name, path string
		privileged bool
	}
	programs := []program{{BinaryMountS3, m.cfg.MountS3Path, false}}
	if m.useHandover(ctx) {
		programs = append(programs, program{BinaryFuseHelper, m.cfg.FuseHelperPath, true})
	}
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return err
	}
	for _, p := range programs {
		if err := m.checkBinary(ctx, p.name, p.path, p.privileged); err != nil {
			return err
		}
		klog.V(2).InfoS("Binary of the mount units runs on the host", "binary", p.name, "path", p.path)
	}
	return nil
}

// checkBinary runs path --version in the oneshot unit s3csi-check-<name>.service.
func (m *Mounter) checkBinary(ctx context.Context, name, path string, privileged bool) error {
	unit := checkUnitPrefix + name + ".service"
	logFile := filepath.Join(m.cfg.StateDir, "."+unit+".log")
	// A unit left by a plugin that died during its check would make the start fail.
	if err := m.stopUnit(ctx, unit); err != nil {
		return err
	}
	_ = os.Remove(logFile)
	defer os.Remove(logFile)
	spec := unitSpec{
		description:    fmt.Sprintf("Check that %s of the S3 CSI driver runs", name),
		kind:           "oneshot",
		argv:           []string{path, "--version"},
		logFile:        logFile,
		timeout:        checkTimeout,
		fullPrivileges: privileged, // as the mount units run it ("+" commands)
		keepFailed:     true,       // to read how it failed
	}
	result, err := m.runUnit(ctx, unit, spec)
	if err != nil {
		return err
	}
	if result == "done" {
		return nil
	}
	bErr := &BinaryError{Binary: name, Path: path, Output: tail(logFile, 1024)}
	err = m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		defer func() {
			if err := c.ResetFailedUnitContext(ctx, unit); err != nil && !isNoSuchUnit(err) {
				klog.V(4).InfoS("Reset of a failed check unit failed", "unit", unit, "err", err)
			}
		}()
		if p, err := c.GetServicePropertyContext(ctx, unit, "Result"); err == nil {
			bErr.Result, _ = p.Value.Value().(string)
		}
		p, err := c.GetServicePropertyContext(ctx, unit, "ExecMainStatus")
		if err != nil {
			return err
		}
		bErr.Status, _ = p.Value.Value().(int32)
		return nil
	})
	if err != nil {
		// The job failed but how is unknown: still a program that did not run.
		klog.V(2).InfoS("Could not read how a check unit failed", "unit", unit, "err", err)
	}
	if bErr.Result == "" {
		bErr.Result = "job " + result
	}
	bErr.NotExecutable = bErr.Result == "exit-code" && bErr.Status == exitExec
	return bErr
}
