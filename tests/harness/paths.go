// Package harness starts and stops the real components the cross-cutting test suites run against:
// an S3 server (versitygw) on a free loopback port, a systemd user manager in its own mount
// namespace, and the project's binaries built into bin/. Every helper registers its own cleanup
// with t.Cleanup, so a test leaves the machine as it found it.
package harness

import (
	"os"
	"path/filepath"
	"runtime"
)

// RepoRoot returns the absolute path of the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("harness: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDirEnv names the variable that points Bin at another directory than the repository's
// bin/: the VM rig's guest (tests/vm) has the binaries on a disk of their own, not the tree.
const BinDirEnv = "S3CSI_BIN_DIR"

// Bin returns the path of a tool or binary that make installs under bin/ (for example
// "versitygw" or "mount-s3"), or under $S3CSI_BIN_DIR when set. It fails the test with a hint
// when the file is missing.
func Bin(t TB, name string) string {
	t.Helper()
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s: run `make test` (or `make tools`) so make builds it first: %v", name, p, err)
	}
	return p
}

// MountS3Env names the variable that makes every suite run another mount-s3 binary instead of
// the stand-in: MOUNT_S3=/path/to/mount-s3 make test runs the same suites against the real one.
const MountS3Env = "MOUNT_S3"

// MountS3In returns the mount-s3 binary for code without a test at hand (the cluster rig): the
// file $MOUNT_S3 names, else mount-s3 in binDir (the stand-in make builds).
func MountS3In(binDir string) string {
	if p := os.Getenv(MountS3Env); p != "" {
		return p
	}
	return filepath.Join(binDir, "mount-s3")
}

// MountS3 returns the mount-s3 binary the suites run: the file $MOUNT_S3 names (an absolute
// path, checked to exist), else the stand-in (tests/mounts3) that make builds into bin/.
func MountS3(t TB) string {
	t.Helper()
	p := os.Getenv(MountS3Env)
	if p == "" {
		return Bin(t, "mount-s3")
	}
	if !filepath.IsAbs(p) {
		t.Fatalf("%s=%q: give an absolute path", MountS3Env, p)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%q: %v", MountS3Env, p, err)
	}
	return p
}
