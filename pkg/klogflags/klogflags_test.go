package klogflags

import (
	"flag"
	"fmt"
	"io"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// valid holds a value klog accepts for each of its flags; a flag klog adds fails
// TestEveryFlagChecked until it has one here.
var valid = map[string]string{
	"v":                                "7",
	"vmodule":                          "foo=3,bar*=2",
	"log_backtrace_at":                 "main.go:12",
	"stderrthreshold":                  "WARNING",
	"alsologtostderrthreshold":         "1",
	"log_dir":                          "/var/log/x",
	"log_file":                         "/var/log/x.log",
	"log_file_max_size":                "0x10",
	"logtostderr":                      "false",
	"alsologtostderr":                  "true",
	"legacy_stderr_threshold_behavior": "false",
	"add_dir_header":                   "true",
	"skip_headers":                     "true",
	"one_output":                       "true",
	"skip_log_headers":                 "true",
}

func newSet(t *testing.T) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	AddChecked(fs)
	return fs
}

// klogState is what klog's own flag values print now.
func klogState(t *testing.T) map[string]string {
	t.Helper()
	ref := flag.NewFlagSet("ref", flag.ContinueOnError)
	klog.InitFlags(ref)
	m := map[string]string{}
	ref.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

func TestEveryFlagChecked(t *testing.T) {
	before := klogState(t)
	fs := newSet(t)
	for name := range before {
		v, ok := valid[name]
		if !ok {
			t.Errorf("klog defines -%s, which has no valid value in this test", name)
			continue
		}
		if err := fs.Set(name, v); err != nil {
			t.Errorf("-%s=%s refused: %v", name, v, err)
		}
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("-%s holds %q, want %q", name, got, v)
		}
	}
	if after := klogState(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("klog's settings changed:\nbefore %v\nafter  %v", before, after)
	}
	if klog.V(7).Enabled() {
		t.Error("-v=7 on a checked flag set raised the process's verbosity")
	}
}

func TestRefusesWhatKlogRefuses(t *testing.T) {
	for _, arg := range []string{
		"-v=x", "-v=99999999999", "-vmodule=foo", "-vmodule=foo=x", "-log_backtrace_at=main",
		"-log_backtrace_at=main.go:0", "-stderrthreshold=LOUD", "-log_file_max_size=-1",
		"-logtostderr=maybe", "-no_such_klog_flag=1",
	} {
		if err := newSet(t).Parse([]string{arg}); err == nil {
			t.Errorf("%s accepted", arg)
		}
	}
	// klog's boolean flags may be given without a value, as main's flag set takes them.
	fs := newSet(t)
	if err := fs.Parse([]string{"-alsologtostderr", "--one_output"}); err != nil {
		t.Fatal(err)
	}
	if fs.Lookup("alsologtostderr").Value.String() != "true" {
		t.Error("-alsologtostderr without a value did not read as true")
	}
}

// TestConcurrentParses is run with -race (make test): flag sets checked at once share klog's
// values only under the package's lock.
func TestConcurrentParses(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			AddChecked(fs)
			if err := fs.Parse([]string{fmt.Sprintf("--v=%d", i), "--vmodule=a=1", "--stderrthreshold=ERROR"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if klog.V(1).Enabled() {
		t.Error("a checked parse raised the process's verbosity")
	}
}
