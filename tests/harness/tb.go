package harness

// TB is the part of testing.TB the harness needs. testing.T and testing.B satisfy it, and so
// can a non-test program (make demo) that wants the same real components.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}
