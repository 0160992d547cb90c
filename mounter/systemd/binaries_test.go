package systemd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/google/go-cmp/cmp"
)

const (
	checkMountS3 = checkUnitPrefix + BinaryMountS3 + ".service"
	checkHelper  = checkUnitPrefix + BinaryFuseHelper + ".service"
)

// execStart returns the argv of the ExecStart of props, and whether they hold the sandbox.
func execStart(t *testing.T, props []sd.Property) (argv []string, sandboxed bool) {
	t.Helper()
	for _, p := range props {
		switch p.Name {
		case "ExecStart":
			cmds, ok := p.Value.Value().([]execCommand)
			if !ok || len(cmds) != 1 {
				t.Fatalf("ExecStart = %v, want one command", p.Value)
			}
			argv = cmds[0].Args
		case "CapabilityBoundingSet":
			sandboxed = true
		}
	}
	return argv, sandboxed
}

// TestCheckBinaries: each program the mount units will run is run once as `<path> --version`
// in a oneshot unit of its own, as the units run it (mount-s3 sandboxed, scality-fuse-helper
// with full privileges), and only when the units will run it (the helper: a helper path and
// systemd 246 or later).
func TestCheckBinaries(t *testing.T) {
	for _, tc := range []struct {
		name, helper, version string
		want                  []string // units started
	}{
		{name: "hand-over", helper: "/opt/bin/scality-fuse-helper", want: []string{checkMountS3, checkHelper}},
		{name: "no helper", helper: "", want: []string{checkMountS3}},
		{name: "systemd before 246", helper: "/opt/bin/scality-fuse-helper", version: `"245.4-4ubuntu3"`, want: []string{checkMountS3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{StateDir: filepath.Join(t.TempDir(), "state"), MountS3Path: "/opt/bin/mount-s3", FuseHelperPath: tc.helper}
			c := &fakeConn{connected: true, absent: true, jobResult: "done", version: tc.version}
			dial, _ := dialer(c)
			if err := newMounter(cfg, dial).CheckBinaries(context.Background()); err != nil {
				t.Fatalf("CheckBinaries: %v", err)
			}
			var got []string
			for _, call := range c.calls {
				if name, ok := strings.CutPrefix(call, "start "); ok {
					got = append(got, name)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("units started (-want +got):\n%s", diff)
			}
			for unit, want := range map[string]struct {
				argv      []string
				sandboxed bool
			}{
				checkMountS3: {[]string{"/opt/bin/mount-s3", "--version"}, true},
				checkHelper:  {[]string{tc.helper, "--version"}, false},
			} {
				props, ok := c.started[unit]
				if !ok {
					continue
				}
				argv, sandboxed := execStart(t, props)
				if !slices.Equal(argv, want.argv) || sandboxed != want.sandboxed {
					t.Errorf("%s runs %q (sandboxed: %v), want %q (sandboxed: %v)", unit, argv, sandboxed, want.argv, want.sandboxed)
				}
			}
			if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
				t.Errorf("the checks left %d files in the state directory", len(entries))
			}
		})
	}
}

// TestCheckBinariesFailures: a program that systemd cannot execute (203/EXEC) or that fails is
// a *BinaryError naming it, its path and how it failed (with its output), and the failed unit
// is reset; a check that could not be made (systemd unreachable) is another error.
func TestCheckBinariesFailures(t *testing.T) {
	const helper = "/opt/bin/scality-fuse-helper"
	for _, tc := range []struct {
		name    string
		results map[string]string
		props   map[string]any
		output  string // what the failing unit prints
		want    BinaryError
		wantMsg string
	}{
		{
			name:    "helper missing",
			results: map[string]string{checkHelper: "failed"},
			props:   map[string]any{checkHelper + " Result": "exit-code", checkHelper + " ExecMainStatus": int32(203)},
			want:    BinaryError{Binary: BinaryFuseHelper, Path: helper, NotExecutable: true, Result: "exit-code", Status: 203},
			wantMsg: "scality-fuse-helper (/opt/bin/scality-fuse-helper) is missing or not executable on the host (systemd could not execute it: status 203/EXEC)",
		},
		{
			name:    "mount-s3 without its library",
			results: map[string]string{checkMountS3: "failed"},
			props:   map[string]any{checkMountS3 + " Result": "exit-code", checkMountS3 + " ExecMainStatus": int32(127)},
			output:  "mount-s3: error while loading shared libraries: libfuse.so.2: cannot open shared object file",
			want: BinaryError{Binary: BinaryMountS3, Path: "/opt/bin/mount-s3", Result: "exit-code", Status: 127,
				Output: "mount-s3: error while loading shared libraries: libfuse.so.2: cannot open shared object file"},
			wantMsg: "mount-s3 (/opt/bin/mount-s3) does not run on the host: /opt/bin/mount-s3 --version ended exit-code (status 127): mount-s3: error while loading shared libraries",
		},
		{
			name:    "mount-s3 hangs",
			results: map[string]string{checkMountS3: "failed"},
			props:   map[string]any{checkMountS3 + " Result": "timeout", checkMountS3 + " ExecMainStatus": int32(0)},
			want:    BinaryError{Binary: BinaryMountS3, Path: "/opt/bin/mount-s3", Result: "timeout"},
			wantMsg: "ended timeout (status 0): (it printed nothing)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{StateDir: filepath.Join(t.TempDir(), "state"), MountS3Path: "/opt/bin/mount-s3", FuseHelperPath: helper}
			c := &fakeConn{connected: true, absent: true, jobResult: "done", startResults: tc.results, serviceProps: tc.props}
			c.onStart = func(unit string) {
				if _, fails := tc.results[unit]; fails && tc.output != "" {
					if err := os.WriteFile(filepath.Join(cfg.StateDir, "."+unit+".log"), []byte(tc.output+"\n"), 0o600); err != nil {
						t.Error(err)
					}
				}
			}
			dial, _ := dialer(c)
			err := newMounter(cfg, dial).CheckBinaries(context.Background())
			var b *BinaryError
			if !errors.As(err, &b) {
				t.Fatalf("CheckBinaries = %v, want a *BinaryError", err)
			}
			if diff := cmp.Diff(tc.want, *b); diff != "" {
				t.Errorf("BinaryError (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q lacks %q", err, tc.wantMsg)
			}
			for unit := range tc.results {
				if !slices.Contains(c.calls, "reset "+unit) {
					t.Errorf("the failed unit %s was not reset: %v", unit, c.calls)
				}
			}
			if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
				t.Errorf("the checks left %d files in the state directory", len(entries))
			}
		})
	}

	t.Run("systemd unreachable", func(t *testing.T) {
		cfg := Config{StateDir: filepath.Join(t.TempDir(), "state"), MountS3Path: "/opt/bin/mount-s3", FuseHelperPath: helper}
		dial, _ := dialer() // every dial fails
		err := newMounter(cfg, dial).CheckBinaries(context.Background())
		var b *BinaryError
		if err == nil || errors.As(err, &b) {
			t.Fatalf("CheckBinaries without systemd = %v, want an error that is not a *BinaryError", err)
		}
	})
}
