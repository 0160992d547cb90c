// Package mountargs turns PersistentVolume mountOptions into the command-line options given to
// mount-s3, under the driver's policy. Both mount modes use it, so a volume mounts with the same
// options whichever mode serves it.
//
// The policy: every option must be one mount-s3 knows (an allow-list kept in step with
// mount-s3's CLI), given as `key`, `key=value` or `key value`, with or without leading dashes;
// values are checked per option; options that would override what the cluster administrator
// controls or that would break the driver are refused with the reason; shell metacharacters,
// whitespace inside values and control characters are refused everywhere. Errors wrap
// ErrInvalid and name the option.
package mountargs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

const (
	// MaxOptions is the most mount options a volume may carry.
	MaxOptions = 64
	// MaxOptionLen is the longest accepted single mount option, in bytes.
	MaxOptionLen = 1024
)

// ErrInvalid is wrapped by every error this package returns for bad user input.
var ErrInvalid = errors.New("invalid mount option")

// Error reports a refused mount option.
type Error struct {
	// Option is the option as the user wrote it (truncated when very long).
	Option string
	// Reason says why it was refused and, where useful, what to do instead.
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("mount option %q: %s", e.Option, e.Reason) }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func refuse(option, format string, a ...any) *Error {
	if len(option) > 80 {
		option = option[:80] + "..."
	}
	return &Error{Option: option, Reason: fmt.Sprintf(format, a...)}
}

// multiSep joins the values of an option given more than once (see spec.multi); no value of
// such an option may contain it.
const multiSep = ","

// Args is a set of mount-s3 options keyed by long option name without dashes ("allow-delete",
// "uid"). Flags have no value; an option mount-s3 takes more than once (bind) holds its values
// joined by multiSep. The zero value is an empty set ready to use.
type Args struct {
	m map[string]string
}

// Has reports whether the option is present.
func (a Args) Has(key string) bool { _, ok := a.m[key]; return ok }

// Get returns the option's value and whether it is present.
func (a Args) Get(key string) (string, bool) { v, ok := a.m[key]; return v, ok }

// Set adds or replaces an option. value is "" for flags.
func (a *Args) Set(key, value string) {
	if a.m == nil {
		a.m = map[string]string{}
	}
	a.m[key] = value
}

// SetIfAbsent adds the option unless it is already present.
func (a *Args) SetIfAbsent(key, value string) {
	if !a.Has(key) {
		a.Set(key, value)
	}
}

// Remove deletes the option and returns its value and whether it was present.
func (a *Args) Remove(key string) (string, bool) {
	v, ok := a.m[key]
	delete(a.m, key)
	return v, ok
}

// BoundCache returns a with mount-s3's --max-cache-size at most maxMiB when a has a cache
// (set when absent, lowered when above); a without a cache, or maxMiB 0, is returned as is.
func (a Args) BoundCache(maxMiB uint64) Args {
	if maxMiB == 0 || !a.Has("cache") {
		return a
	}
	v, ok := a.Get("max-cache-size")
	if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil && n <= maxMiB {
		return a
	}
	out := a.Clone()
	out.Set("max-cache-size", strconv.FormatUint(maxMiB, 10))
	return out
}

// Clone returns an independent copy.
func (a Args) Clone() Args {
	var c Args
	for k, v := range a.m {
		c.Set(k, v)
	}
	return c
}

// List renders the options sorted by name as "--key" or "--key=value", so the same set always
// yields the same command line. An option whose path the driver owns (cache) renders as a bare
// "--cache" until SetOwnedPaths gives it a directory.
func (a Args) List() []string {
	out := make([]string, 0, len(a.m))
	for k, v := range a.m {
		switch {
		case specs[k].kind == flag || v == "":
			out = append(out, "--"+k)
		case specs[k].multi:
			for _, one := range strings.Split(v, multiSep) {
				out = append(out, "--"+k+"="+one)
			}
		default:
			out = append(out, "--"+k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// OwnedPathOptions lists the options whose value is a host directory the driver creates and
// owns (never one a PV names): mount-s3's local cache.
var OwnedPathOptions = []string{"cache"}

// SetOwnedPaths returns a copy of rendered (a List result) in which every bare owned-path
// option ("--cache") gets dir(name) as its value ("--cache=<dir>"), and the names of the
// options it filled in, so the caller creates those directories. It leaves everything else as
// it is.
func SetOwnedPaths(rendered []string, dir func(name string) string) ([]string, []string) {
	out := slices.Clone(rendered)
	var filled []string
	for i, a := range out {
		name := strings.TrimPrefix(a, "--")
		if slices.Contains(OwnedPathOptions, name) {
			out[i] = a + "=" + dir(name)
			filled = append(filled, name)
		}
	}
	return out, filled
}

// Options are the inputs of Build.
type Options struct {
	// MountFlags are the PV's mountOptions (CSI volume_capability.mount.mount_flags).
	MountFlags []string
	// ReadOnly is set for read-only publishes and MULTI_NODE_READER_ONLY volumes.
	ReadOnly bool
	// FSGroup is the workload's fsGroup (CSI volume_mount_group), already validated with
	// ValidateGID, or "" when kubelet sent none.
	FSGroup string
	// UserAgentPrefix is the value of --user-agent-prefix; the driver owns this option.
	UserAgentPrefix string
}

// Result is what Build produces.
type Result struct {
	// Args are the mount-s3 options (without bucket and mount point).
	Args Args
	// Env holds environment variables derived from options (for example AWS_MAX_ATTEMPTS=5).
	Env []string
}

// Build validates o.MountFlags and returns the mount-s3 options the driver runs with:
//   - the user's options, normalised;
//   - --force-path-style (S3-compatible stores need path-style addressing);
//   - --user-agent-prefix=o.UserAgentPrefix;
//   - --read-only when o.ReadOnly;
//   - with an fsGroup: --gid=<fsGroup>, --allow-other, --dir-mode=770, --file-mode=660, each
//     unless the user set it (--allow-other is also skipped when the user chose --allow-root);
//   - --aws-max-attempts=N moves to the environment as AWS_MAX_ATTEMPTS=N.
//
// It returns an *Error (wrapping ErrInvalid) naming the first refused option.
func Build(o Options) (Result, error) {
	if len(o.MountFlags) > MaxOptions {
		return Result{}, &Error{Option: fmt.Sprintf("(%d options)", len(o.MountFlags)), Reason: fmt.Sprintf("too many mount options, at most %d are accepted", MaxOptions)}
	}
	var args Args
	var env []string
	for _, raw := range o.MountFlags {
		key, value, err := parseOne(raw)
		if err != nil {
			return Result{}, err
		}
		if key == "aws-max-attempts" {
			env = append(env, "AWS_MAX_ATTEMPTS="+value)
			continue
		}
		old, dup := args.Get(key)
		switch {
		case dup && specs[key].multi:
			args.Set(key, old+multiSep+value)
		case dup && old != value:
			return Result{}, refuse(raw, "given more than once with different values")
		default:
			args.Set(key, value)
		}
	}
	if len(env) > 1 {
		return Result{}, refuse("aws-max-attempts", "given more than once")
	}
	if err := checkRelations(args); err != nil {
		return Result{}, err
	}
	args.Set("force-path-style", "")
	args.Set("user-agent-prefix", o.UserAgentPrefix)
	if o.ReadOnly {
		args.Set("read-only", "")
	}
	if o.FSGroup != "" {
		args.SetIfAbsent("gid", o.FSGroup)
		if !args.Has("allow-root") {
			args.SetIfAbsent("allow-other", "")
		}
		args.SetIfAbsent("dir-mode", "770")
		args.SetIfAbsent("file-mode", "660")
	}
	return Result{Args: args, Env: env}, nil
}

// ValidateGID checks a CSI volume_mount_group: a decimal group id between 1 and 4294967295
// (mount-s3 refuses gid 0).
func ValidateGID(gid string) error {
	if err := idRange(gid); err != nil {
		return fmt.Errorf("%w: volume mount group %q: %v", ErrInvalid, gid, err)
	}
	return nil
}

// parseOne validates one user option and returns its canonical key and value.
func parseOne(raw string) (string, string, error) {
	if len(raw) > MaxOptionLen {
		return "", "", refuse(raw, "longer than %d bytes", MaxOptionLen)
	}
	if !utf8.ValidString(raw) {
		return "", "", refuse(strings.ToValidUTF8(raw, "?"), "not valid UTF-8")
	}
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", "", refuse(raw, "empty option")
	}
	if err := safetext.CheckRunes(s); err != nil {
		return "", "", refuse(strings.Map(func(r rune) rune {
			if safetext.Unsafe(r) {
				return '?'
			}
			return r
		}, raw), "%v", err)
	}
	name := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "-")
	if strings.HasPrefix(name, "-") {
		return "", "", refuse(raw, "too many leading dashes")
	}
	key, value, hasValue := name, "", false
	if i := strings.IndexAny(name, "= "); i >= 0 {
		key, value, hasValue = name[:i], strings.TrimSpace(name[i+1:]), true
	}
	if key == "" || !safetext.IsWord(key, "-") {
		return "", "", refuse(raw, "not a mount-s3 option name")
	}
	if alias, ok := shortAliases[key]; ok {
		key = alias
	}
	sp, known := specs[key]
	if !known {
		return "", "", refuse(raw, "unknown mount-s3 option; see docs/configuration.md for the supported list")
	}
	if sp.forbidden != "" {
		return "", "", refuse(raw, "not allowed: %s", sp.forbidden)
	}
	switch {
	case sp.kind == flag && hasValue:
		return "", "", refuse(raw, "is a flag and takes no value")
	case sp.kind == valued && (!hasValue || value == ""):
		return "", "", refuse(raw, "needs a value")
	case sp.kind == ownedPath && hasValue:
		return "", "", refuse(raw, "takes no path: the driver gives mount-s3 a %s directory of its own for each mount (a PV must not name host paths); write %s alone", key, key)
	case sp.kind == flag || sp.kind == ownedPath:
		return key, "", nil
	}
	if err := checkValueChars(value); err != nil {
		return "", "", refuse(raw, "value %v", err)
	}
	if err := sp.check(value); err != nil {
		return "", "", refuse(raw, "invalid value: %v", err)
	}
	return key, value, nil
}

// shellMeta are characters that mean something to a shell; no mount-s3 value needs them.
const shellMeta = "`$&|;<>()[]{}'\"\\!*?#~^"

func checkValueChars(v string) error {
	if i := strings.IndexFunc(v, unicode.IsSpace); i >= 0 {
		return errors.New("contains whitespace")
	}
	if i := strings.IndexAny(v, shellMeta); i >= 0 {
		return fmt.Errorf("contains the shell metacharacter %q", v[i])
	}
	return nil
}

// checkRelations enforces mount-s3's own option conflicts and requirements up front, so the
// user gets a clear CSI error instead of a mount-s3 usage error at mount time.
func checkRelations(a Args) error {
	conflicts := [][2]string{
		{"allow-other", "allow-root"},
		{"part-size", "read-part-size"},
		{"part-size", "write-part-size"},
		{"no-log", "debug"}, {"no-log", "debug-crt"}, {"no-log", "log-directory"}, {"no-log", "log-metrics"},
	}
	for _, c := range conflicts {
		if a.Has(c[0]) && a.Has(c[1]) {
			return refuse(c[1], "cannot be combined with --%s", c[0])
		}
	}
	requires := [][2]string{{"max-cache-size", "cache"}, {"sse-kms-key-id", "sse"}}
	for _, r := range requires {
		if a.Has(r[0]) && !a.Has(r[1]) {
			return refuse(r[0], "requires --%s", r[1])
		}
	}
	// mount-s3 refuses these at start-up (exit 1, not a usage error): said here first.
	if sse, _ := a.Get("sse"); sse == "AES256" && a.Has("sse-kms-key-id") {
		return refuse("sse-kms-key-id", "cannot be used with --sse AES256 (use --sse aws:kms or aws:kms:dsse)")
	}
	return CheckReadPartSize(a)
}

// CheckReadPartSize refuses, with an explicit --memory-target, a read part size (read-part-size,
// else part-size) above the target's data-buffer budget, which mount-s3 refuses at start-up.
func CheckReadPartSize(a Args) error {
	t, ok := a.Get("memory-target")
	if !ok {
		return nil
	}
	target, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return refuse("memory-target="+t, "not a number of MiB")
	}
	for _, k := range []string{"read-part-size", "part-size"} {
		v, ok := a.Get(k)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil && n > DataBufferBudgetMiB(target)<<20 {
			return refuse(k+"="+v, "exceeds the %d MiB mount-s3 keeps for data buffers out of memory-target %d MiB: raise memory-target (or the mount's memory limit) or lower %s", DataBufferBudgetMiB(target), target, k)
		}
		break
	}
	return nil
}
