package nodeplugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
)

type fakeChecker struct{ err error }

func (f fakeChecker) CheckBinaries(context.Context) error { return f.err }

// TestCheckBinaries: a program of the mount units that does not run on the host stops the
// plugin with a message naming the program, its path and the flag that sets it; a check that
// could not be made lets the plugin start.
func TestCheckBinaries(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string // in the error; none: nil
	}{
		{name: "both run"},
		{name: "systemd unreachable", err: errors.New("mount backend unavailable: systemd: connection refused")},
		{
			name: "helper missing",
			err:  &systemd.BinaryError{Binary: systemd.BinaryFuseHelper, Path: "/opt/mountpoint-s3-csi/bin/scality-fuse-helper", NotExecutable: true, Result: "exit-code", Status: 203},
			want: []string{
				"systemd mode cannot mount: scality-fuse-helper (/opt/mountpoint-s3-csi/bin/scality-fuse-helper) is missing or not executable on the host",
				"--fuse-helper-path names it", "to empty to let mount-s3 mount FUSE itself", "--systemd-mounter=false",
			},
		},
		{
			name: "mount-s3 missing",
			err:  &systemd.BinaryError{Binary: systemd.BinaryMountS3, Path: "/usr/local/bin/mount-s3", NotExecutable: true, Result: "exit-code", Status: 203},
			want: []string{"mount-s3 (/usr/local/bin/mount-s3) is missing or not executable on the host", "--mount-s3-path names it", "node.mountS3InstallDir"},
		},
		{
			name: "mount-s3 does not run",
			err:  &systemd.BinaryError{Binary: systemd.BinaryMountS3, Path: "/opt/bin/mount-s3", Result: "exit-code", Status: 127, Output: "libfuse.so.2: cannot open shared object file"},
			want: []string{"mount-s3 (/opt/bin/mount-s3) does not run on the host", "(status 127): libfuse.so.2", "--mount-s3-path names it"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBinaries(context.Background(), fakeChecker{tc.err})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("checkBinaries = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkBinaries = nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestBinaryFlags: every program the systemd mounter checks has its flag and a fix.
func TestBinaryFlags(t *testing.T) {
	for _, b := range []string{systemd.BinaryMountS3, systemd.BinaryFuseHelper} {
		if f := binaryFlags[b]; f.flag == "" || !strings.Contains(f.fix, f.flag) {
			t.Errorf("%s: flag %q, fix %q", b, f.flag, f.fix)
		}
	}
}
