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

// Bin returns the path of a tool or binary that make installs under bin/ (for example
// "versitygw" or "mount-s3"). It fails the test with a hint when the file is missing.
func Bin(t TB, name string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s: run `make test` (or `make tools`) so make builds it first: %v", name, p, err)
	}
	return p
}

// MountS3 returns the path of the mount-s3 stand-in (tests/mounts3) built by make into bin/.
func MountS3(t TB) string { return Bin(t, "mount-s3") }
