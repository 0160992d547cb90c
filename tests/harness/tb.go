package harness

import "time"

// TB is the part of testing.TB the harness needs. testing.T and testing.B satisfy it, and so
// can a non-test program (make demo) that wants the same real components.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Must fails t when err is not nil.
func Must(t TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
}

// Eventually polls cond every 50 ms until it returns "" (success) or timeout passes, then fails
// t with cond's last explanation.
func Eventually(t TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		if why = cond(); why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v: %s", timeout, why)
}
