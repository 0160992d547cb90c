package harness

import (
	"fmt"
	"os"
)

// MainTB is a TB for TestMain (or a program): cleanups run at Close, in reverse order;
// Fatalf cleans up and exits.
type MainTB struct {
	tmp      string
	cleanups []func()
}

// NewMainTB returns a MainTB with its own temporary directory.
func NewMainTB() *MainTB {
	dir, err := os.MkdirTemp("", "s3csi-")
	if err != nil {
		panic(err)
	}
	return &MainTB{tmp: dir}
}

// Helper does nothing (there is no test to mark).
func (m *MainTB) Helper() {}

// Logf prints a line on stderr.
func (m *MainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// Cleanup registers f to run at Close (last registered first).
func (m *MainTB) Cleanup(f func()) { m.cleanups = append(m.cleanups, f) }

// Fatalf prints the message, runs the cleanups and exits with status 1.
func (m *MainTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FATAL: "+format+"\n", args...)
	m.Close()
	os.Exit(1)
}

// TempDir returns a new directory below the MainTB's own, removed at Close.
func (m *MainTB) TempDir() string {
	dir, err := os.MkdirTemp(m.tmp, "t-")
	if err != nil {
		m.Fatalf("temp dir: %v", err)
	}
	return dir
}

// Close runs the cleanups (latest first) and removes the temporary directory.
func (m *MainTB) Close() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
	os.RemoveAll(m.tmp)
}
