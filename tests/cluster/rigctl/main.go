// Command rigctl brings the cluster suite's single-node Kubernetes cluster up and down (see
// package rig) and runs commands inside its network namespace. `make test-cluster` uses
// `rigctl run`; developers can keep a cluster up between test runs:
//
//	rigctl up                      start the cluster (returns once the node is Ready)
//	rigctl exec -- kubectl get pods -A
//	rigctl down [-keep-logs DIR]   stop and remove everything the rig made
//	rigctl run [-keep-logs DIR] -- CMD...
//	                               up, CMD inside the cluster's network namespace, down
//	                               (always, also on failure or SIGINT/SIGTERM); exits with
//	                               CMD's status
//
// Commands run with KUBECONFIG set to the cluster's admin kubeconfig and bin/k8s first in PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	bin := fs.String("bin", defaultBin(), "the repository's bin/ directory")
	keepLogs := fs.String("keep-logs", "", "copy the cluster's logs to this directory before tearing it down")
	timings := fs.String("timings", "", "append how long each start-up step took to this file (make test's timing table)")
	_ = fs.Parse(os.Args[2:])
	opts := rig.Options{Bin: *bin, Log: os.Stderr, Timings: *timings}
	var err error
	code := 0
	switch os.Args[1] {
	case "up":
		err = up(opts)
	case "inside": // StartInside, re-executed by up inside the network namespace
		err = rig.StartInside(context.Background(), opts)
	case "down":
		err = rig.Down(*keepLogs, os.Stderr)
	case "exec":
		code, err = execInside(*bin, fs.Args())
	case "run":
		code, err = runAll(opts, *keepLogs, fs.Args())
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rigctl %s: %v\n", os.Args[1], err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: rigctl up|down|exec|run [-bin DIR] [-keep-logs DIR] [-timings FILE] [-- CMD...]")
	os.Exit(2)
}

// defaultBin is the bin/ directory next to this program (bin/rigctl).
func defaultBin() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

// up prepares the host, then runs the rest inside the network namespace.
func up(opts rig.Options) error {
	start := time.Now()
	if err := rig.PrepareHost(opts); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argv := rig.InNetNS(self, "inside", "-bin", opts.Bin, "-timings", opts.Timings)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster start-up failed (rigctl down cleans up): %w", err)
	}
	fmt.Fprintf(os.Stderr, "[rig] cluster up in %.1fs; kubeconfig %s\n", time.Since(start).Seconds(), rig.Kubeconfig())
	rig.RecordTiming(opts.Timings, "rig/cluster-up", time.Since(start))
	return nil
}

// execInside runs argv inside the network namespace and returns its exit code.
func execInside(bin string, argv []string) (int, error) {
	if len(argv) == 0 {
		return 2, errors.New("no command given (rigctl exec -- CMD...)")
	}
	full := rig.InNetNS(argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = append(os.Environ(), rig.ClientEnv(bin)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// reap collects every exited child (the adopted daemons once Down stopped them).
func reap() {
	for {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// runAll is up, exec, down; down runs whatever happens, also on SIGINT/SIGTERM (forwarded to
// the command first).
func runAll(opts rig.Options, keepLogs string, argv []string) (int, error) {
	// The daemons outlive the process that started them: adopt them (subreaper) so they are
	// reaped here after the teardown instead of lingering as zombies.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("become a subreaper: %w", err)
	}
	defer reap()
	if err := rig.Down("", os.Stderr); err != nil {
		return 1, fmt.Errorf("tearing down a previous rig: %w", err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	code, err := 1, up(opts)
	if err == nil {
		full := rig.InNetNS(argv...)
		cmd := exec.Command(full[0], full[1:]...)
		cmd.Env = append(os.Environ(), rig.ClientEnv(opts.Bin)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err = cmd.Start(); err == nil {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
				select {
				case err = <-done:
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					err = <-done
				}
			}
			var exit *exec.ExitError
			switch {
			case errors.As(err, &exit):
				code, err = exit.ExitCode(), nil
			case err == nil:
				code = 0
			}
		}
	}
	t := time.Now()
	if derr := rig.Down(keepLogs, os.Stderr); derr != nil {
		err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
	}
	fmt.Fprintf(os.Stderr, "[rig] torn down in %.1fs\n", time.Since(t).Seconds())
	return code, err
}
