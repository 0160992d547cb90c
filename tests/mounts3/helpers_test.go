package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// with returns e with the entries of more added (e's win).
func (e env) with(more env) env {
	out := env{}
	for k, v := range more {
		out[k] = v
	}
	for k, v := range e {
		out[k] = v
	}
	return out
}

// runStandinIn is runStandin with the working directory dir.
func runStandinIn(t *testing.T, dir string, e env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, func(c *exec.Cmd) { c.Dir = dir }, e, args...)
}

// runWithStdin is runStandin with stdin as standard input; it returns the exit code and stderr.
func runWithStdin(t *testing.T, stdin *os.File, e env, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := runCmd(t, func(c *exec.Cmd) { c.Stdin = stdin }, e, args...)
	return code, stderr
}

// runCmd runs the stand-in to completion (bounded by cmdTimeout), adjusted by prep.
func runCmd(t *testing.T, prep func(*exec.Cmd), e env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(standinBin, args...)
	cmd.Env = e.list()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	prep(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("mount-s3 %q: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	case <-time.After(cmdTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("mount-s3 %q did not finish within %v (a daemon child holding stdout/stderr open?)\nstdout: %s\nstderr: %s", args, cmdTimeout, out.String(), errb.String())
		return 0, "", ""
	}
}

// mountTmpfs mounts a small tmpfs at dir, removed at cleanup if still there.
func mountTmpfs(t *testing.T, dir string) error {
	if err := unix.Mount("s3csi-test", dir, "tmpfs", 0, "size=64k"); err != nil {
		return err
	}
	t.Cleanup(func() {
		for mountsAt(t, dir) > 0 {
			if unix.Unmount(dir, unix.MNT_DETACH) != nil {
				return
			}
		}
	})
	return nil
}

// procStatField returns field n (1-based, as in proc(5)) of /proc/<pid>/stat.
func procStatField(t *testing.T, pid, n int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+2:])
	return string(f[n-3])
}

// waitServing waits until a foreground stand-in's session exists at dir: its mount entry and
// the line it logs once its signal handler is installed (which comes after the mount, as
// mount-s3's does: a signal between the two has its default action).
func waitServing(t *testing.T, dir string, output func() string) {
	t.Helper()
	waitFor(t, "foreground mount", func() bool {
		_, ok := mountEntry(dir)
		return ok && strings.Contains(output(), "successfully mounted")
	})
}
