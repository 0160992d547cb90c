// Package klogflags lets a flag set check klog's command-line flags (-v, -vmodule and the
// others klog.InitFlags defines) without changing how the process logs.
//
// klog.InitFlags binds its flags to process-wide state: parsing "-v=5" on any flag set raises
// the whole process's verbosity, and two flag sets parsed at once race on it. The options
// packages' Parse functions check a binary's arguments the way its main does, possibly many at
// once (the chart tests); this package gives them klog's parsers without klog's side effects.
package klogflags

import (
	"flag"
	"strconv"
	"sync"

	"k8s.io/klog/v2"
)

// mu serialises every use of klog's flag values by this package: they are process-wide.
var mu sync.Mutex

// klogs holds klog's own flag values, bound once (under mu).
var klogs *flag.FlagSet

// AddChecked defines on fs every flag klog.InitFlags defines, with klog's name, usage and
// boolean-ness. Setting one checks the text with klog's own parser, so fs refuses exactly what
// the binary's main refuses, then puts klog's setting back as it was: the process's logging is
// unchanged. Safe for concurrent use.
func AddChecked(fs *flag.FlagSet) {
	mu.Lock()
	defer mu.Unlock()
	if klogs == nil {
		klogs = flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogs)
	}
	klogs.VisitAll(func(f *flag.Flag) {
		v := &checked{real: f.Value, text: f.DefValue}
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case bool, string, uint64:
				v.plain = g.Get()
			}
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			fs.Var(&checkedBool{v}, f.Name, f.Usage)
			return
		}
		fs.Var(v, f.Name, f.Usage)
	})
}

// checked is a flag value that holds the text it was given, once klog's value (real) accepted
// it.
type checked struct {
	real flag.Value
	// plain is the Go type of a flag klog defines with the flag package's own kinds (bool,
	// string, uint64), checked without touching klog at all; nil for klog's types.
	plain any
	text  string
}

func (c *checked) String() string {
	if c == nil {
		return ""
	}
	return c.text
}

// Set checks s as the flag package would for a bool, string or uint64 flag; for klog's own
// types (-v, -vmodule, -stderrthreshold, -log_backtrace_at...) with klog's parser, restoring
// klog's previous setting. A value klog prints but does not parse back (an unset
// -log_backtrace_at prints ":0") is restored as unset ("").
func (c *checked) Set(s string) error {
	switch c.plain.(type) {
	case bool:
		if _, err := strconv.ParseBool(s); err != nil {
			return err
		}
		c.text = s
		return nil
	case uint64:
		if _, err := strconv.ParseUint(s, 0, 64); err != nil {
			return err
		}
		c.text = s
		return nil
	case string:
		c.text = s
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	old := c.real.String()
	if err := c.real.Set(s); err != nil {
		return err
	}
	if err := c.real.Set(old); err != nil {
		_ = c.real.Set("")
	}
	c.text = s
	return nil
}

// checkedBool is checked for klog's boolean flags (-logtostderr and the like), which may be
// given without a value.
type checkedBool struct{ *checked }

func (checkedBool) IsBoolFlag() bool { return true }
