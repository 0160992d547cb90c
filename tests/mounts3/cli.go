package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ttl is a parsed --metadata-ttl / --negative-metadata-ttl value.
type ttl struct {
	set        bool          // the option was given
	minimal    bool          // "minimal"
	indefinite bool          // "indefinite" (100 years)
	zero       bool          // given as "0": --metadata-ttl turns it into "minimal" (with a warning)
	d          time.Duration // explicit number of seconds
}

// Options is the parsed command line. Zero values mean "not given"; defaults are applied by
// the code that consumes them (see fsConfigFor and newS3Client).
type Options struct {
	Bucket, MountPoint string

	Prefix, Region, EndpointURL, BucketType, Profile, StorageClass string
	ExpectedBucketOwner, LogDirectory, Cache, CacheXZ              string
	UserAgentPrefix, SSE, SSEKMSKeyID, UploadChecksums             string
	CABundle                                                       string // valid when HasCABundle
	Bind                                                           []string
	HasCABundle                                                    bool

	ForcePathStyle, TransferAcceleration, DualStack, RequesterPays, NoSignRequest bool
	ReadOnly, AllowDelete, AllowOverwrite, IncrementalUpload, AutoUnmount         bool
	AllowRoot, AllowOther, LogMetrics, Debug, DebugCRT, NoLog, Foreground         bool
	Help, Version, InferContentType                                               bool

	MaxThroughputGbps, MaxThreads, PartSize, ReadPartSize, WritePartSize, MaxCacheSize uint64
	MemoryTarget, OTLPExportInterval                                                   uint64 // MiB, seconds
	HasMemoryTarget                                                                    bool
	OTLPEndpoint                                                                       string

	UID, GID                uint32 // valid when HasUID / HasGID
	HasUID, HasGID          bool
	DirMode, FileMode       uint32 // valid when HasDirMode / HasFileMode
	HasDirMode, HasFileMode bool

	MetadataTTL, NegativeMetadataTTL ttl
}

// usageError is a command-line error. main prints its text (already clap-formatted, starting
// with "error: ") to stderr and exits 2, like clap does.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

const usageLine = "Usage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>"

func usagef(format string, args ...any) error {
	return &usageError{"error: " + fmt.Sprintf(format, args...) + "\n\n" + usageLine +
		"\n\nFor more information, try '--help'.\n"}
}

// optSpec describes one option. An empty value name marks a flag (no value).
type optSpec struct {
	long, short, value string
	env                string // clap's env fallback: the value when the option is absent (only --ca-bundle)
	multi              bool   // may be repeated (only --bind)
	set                func(o *Options, v string) error
}

func (s *optSpec) display() string {
	if s.value == "" {
		return "--" + s.long
	}
	return "--" + s.long + " <" + s.value + ">"
}

// flag returns a setter for a boolean field.
func flag(f func(o *Options) *bool) func(*Options, string) error {
	return func(o *Options, _ string) error { *f(o) = true; return nil }
}

// str returns a setter for a string field.
func str(f func(o *Options) *string) func(*Options, string) error {
	return func(o *Options, v string) error { *f(o) = v; return nil }
}

// rustParseErr is the text of Rust's ParseIntError for v.
func rustParseErr(v string, err error) error {
	switch {
	case v == "":
		return fmt.Errorf("cannot parse integer from empty string")
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-"):
		return fmt.Errorf("number too large to fit in target type")
	case errors.Is(err, strconv.ErrRange):
		return fmt.Errorf("number too small to fit in target type")
	}
	return fmt.Errorf("invalid digit found in string")
}

// parseRustUint is Rust's u64 FromStr: decimal digits after an optional '+'.
func parseRustUint(v string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "+"), 10, 64)
	if err != nil {
		return 0, rustParseErr(v, err)
	}
	return n, nil
}

// u64 is clap's value_parser!(u64).range(min..) (RangedU64ValueParser; its bounds read
// "min..18446744073709551615" when open-ended); exclusiveMax marks a range(min..max), which
// refuses u64::MAX itself (the part sizes' range(1..usize::MAX)).
func u64(min uint64, exclusiveMax bool, f func(o *Options) *uint64) func(*Options, string) error {
	return func(o *Options, v string) error {
		n, err := parseRustUint(v)
		if err != nil {
			return err
		}
		if n < min || (exclusiveMax && n == math.MaxUint64) {
			return fmt.Errorf("%d is not in %d..%d", n, min, uint64(math.MaxUint64))
		}
		*f(o) = n
		return nil
	}
}

// u32 is clap's value_parser!(u32).range(1..): the value is parsed as an i64 (so "-1" and
// "4294967296" are range errors) and must be in 1..=4294967295 (RangedI64ValueParser).
func u32(f func(o *Options) (*uint32, *bool)) func(*Options, string) error {
	return func(o *Options, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return rustParseErr(v, err)
		}
		if n < 1 || n > math.MaxUint32 {
			return fmt.Errorf("%d is not in 1..=%d", n, uint32(math.MaxUint32))
		}
		p, has := f(o)
		*p, *has = uint32(n), true
		return nil
	}
}

// pathValue is clap's PathBuf value parser: any value but an empty one, which clap reports as a
// missing value (errEmpty).
func pathValue(f func(o *Options) *string) func(*Options, string) error {
	return func(o *Options, v string) error {
		if v == "" {
			return errEmpty
		}
		*f(o) = v
		return nil
	}
}

// errEmpty marks an empty value where clap wants one (PathBufValueParser).
var errEmpty = errors.New("empty value")

// perm parses permission bits in octal ("770", "0770"); only 0..0777 is accepted.
func perm(f func(o *Options) (*uint32, *bool)) func(*Options, string) error {
	return func(o *Options, v string) error {
		n, err := strconv.ParseUint(v, 8, 16)
		if err != nil {
			return fmt.Errorf("must be a valid octal number")
		}
		if n > 0o777 {
			return fmt.Errorf("only user/group/other permissions are supported")
		}
		p, has := f(o)
		*p, *has = uint32(n), true
		return nil
	}
}

func choice(values []string, f func(o *Options) *string) func(*Options, string) error {
	return func(o *Options, v string) error {
		for _, c := range values {
			if v == c {
				*f(o) = v
				return nil
			}
		}
		return &possibleValues{values}
	}
}

// possibleValues is the clap error for a value outside an enumeration.
type possibleValues struct{ values []string }

func (p *possibleValues) Error() string { return "" }

// parseTTL accepts "minimal", "indefinite" or a number of seconds up to 100 years
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/fs/time_to_live.rs, new_from_str). "0"
// is a zero duration; only --metadata-ttl turns it into "minimal" (ttls, and the warning in
// run), --negative-metadata-ttl keeps it (cli.rs, cache_config).
func parseTTL(f func(o *Options) *ttl) func(*Options, string) error {
	return func(o *Options, v string) error {
		t := ttl{set: true}
		switch v {
		case "minimal":
			t.minimal = true
		case "indefinite":
			t.indefinite = true
		default:
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("TTL must be a valid number of seconds, or 'indefinite', or 'minimal'")
			}
			if n > 100*365*24*3600 {
				return fmt.Errorf("TTL must not be greater than 3153600000s (~100 years), or be 'indefinite', or 'minimal'")
			}
			t.d = time.Duration(n) * time.Second
			t.zero = n == 0
		}
		*f(o) = t
		return nil
	}
}

var bucketNameRE = regexp.MustCompile(`^[0-9a-zA-Z\-._]+$`)

// validateBucket mirrors mount-s3's quick sanity filter for the bucket argument.
func validateBucket(b string) error {
	switch {
	case len(b) < 3 || len(b) > 255:
		return fmt.Errorf("bucket names must be 3-255 characters long")
	case strings.Contains(b, "s3://"):
		return fmt.Errorf("bucket name should not be an s3:// URI (provide the bare bucket name instead; use --prefix for prefix mounts)")
	case !bucketNameRE.MatchString(b) && !strings.HasPrefix(b, "arn:"):
		return fmt.Errorf("bucket argument should be a valid bucket name(only letters, numbers, . and -) or a valid ARN")
	}
	return nil
}

var specs = []*optSpec{
	{long: "prefix", value: "PREFIX", set: func(o *Options, v string) error {
		if v != "" && !strings.HasSuffix(v, "/") {
			return fmt.Errorf("prefix must end in '/'")
		}
		o.Prefix = v
		return nil
	}},
	{long: "region", value: "REGION", set: str(func(o *Options) *string { return &o.Region })},
	{long: "endpoint-url", value: "ENDPOINT_URL", set: str(func(o *Options) *string { return &o.EndpointURL })},
	{long: "force-path-style", set: flag(func(o *Options) *bool { return &o.ForcePathStyle })},
	{long: "transfer-acceleration", set: flag(func(o *Options) *bool { return &o.TransferAcceleration })},
	{long: "dual-stack", set: flag(func(o *Options) *bool { return &o.DualStack })},
	{long: "requester-pays", set: flag(func(o *Options) *bool { return &o.RequesterPays })},
	{long: "bucket-type", value: "BUCKET_TYPE", set: choice([]string{"general-purpose", "directory"}, func(o *Options) *string { return &o.BucketType })},
	{long: "no-sign-request", set: flag(func(o *Options) *bool { return &o.NoSignRequest })},
	{long: "profile", value: "PROFILE", set: str(func(o *Options) *string { return &o.Profile })},
	{long: "read-only", set: flag(func(o *Options) *bool { return &o.ReadOnly })},
	{long: "storage-class", value: "STORAGE_CLASS", set: str(func(o *Options) *string { return &o.StorageClass })},
	{long: "allow-delete", set: flag(func(o *Options) *bool { return &o.AllowDelete })},
	{long: "allow-overwrite", set: flag(func(o *Options) *bool { return &o.AllowOverwrite })},
	{long: "incremental-upload", set: flag(func(o *Options) *bool { return &o.IncrementalUpload })},
	{long: "auto-unmount", set: flag(func(o *Options) *bool { return &o.AutoUnmount })},
	{long: "allow-root", set: flag(func(o *Options) *bool { return &o.AllowRoot })},
	{long: "allow-other", set: flag(func(o *Options) *bool { return &o.AllowOther })},
	{long: "maximum-throughput-gbps", value: "N", set: u64(1, false, func(o *Options) *uint64 { return &o.MaxThroughputGbps })},
	{long: "max-threads", value: "N", set: u64(1, false, func(o *Options) *uint64 { return &o.MaxThreads })},
	{long: "part-size", value: "SIZE", set: u64(1, true, func(o *Options) *uint64 { return &o.PartSize })},
	{long: "read-part-size", value: "SIZE", set: u64(1, true, func(o *Options) *uint64 { return &o.ReadPartSize })},
	{long: "write-part-size", value: "SIZE", set: u64(1, true, func(o *Options) *uint64 { return &o.WritePartSize })},
	{long: "memory-target", value: "MiB", set: func(o *Options, v string) error {
		o.HasMemoryTarget = true
		return u64(512, false, func(o *Options) *uint64 { return &o.MemoryTarget })(o, v)
	}},
	{long: "ca-bundle", value: "PATH", env: "AWS_CA_BUNDLE", set: func(o *Options, v string) error {
		o.HasCABundle = true
		return pathValue(func(o *Options) *string { return &o.CABundle })(o, v)
	}},
	{long: "uid", value: "UID", set: u32(func(o *Options) (*uint32, *bool) { return &o.UID, &o.HasUID })},
	{long: "gid", value: "GID", set: u32(func(o *Options) (*uint32, *bool) { return &o.GID, &o.HasGID })},
	{long: "dir-mode", value: "DIR_MODE", set: perm(func(o *Options) (*uint32, *bool) { return &o.DirMode, &o.HasDirMode })},
	{long: "file-mode", value: "FILE_MODE", set: perm(func(o *Options) (*uint32, *bool) { return &o.FileMode, &o.HasFileMode })},
	{long: "foreground", short: "f", set: flag(func(o *Options) *bool { return &o.Foreground })},
	{long: "expected-bucket-owner", value: "AWS_ACCOUNT_ID", set: str(func(o *Options) *string { return &o.ExpectedBucketOwner })},
	{long: "log-directory", short: "l", value: "DIRECTORY", set: pathValue(func(o *Options) *string { return &o.LogDirectory })},
	{long: "log-metrics", set: flag(func(o *Options) *bool { return &o.LogMetrics })},
	{long: "debug", short: "d", set: flag(func(o *Options) *bool { return &o.Debug })},
	{long: "debug-crt", set: flag(func(o *Options) *bool { return &o.DebugCRT })},
	{long: "no-log", set: flag(func(o *Options) *bool { return &o.NoLog })},
	{long: "cache", value: "DIRECTORY", set: pathValue(func(o *Options) *string { return &o.Cache })},
	{long: "metadata-ttl", value: "SECONDS|indefinite|minimal", set: parseTTL(func(o *Options) *ttl { return &o.MetadataTTL })},
	{long: "negative-metadata-ttl", value: "SECONDS|indefinite|minimal", set: parseTTL(func(o *Options) *ttl { return &o.NegativeMetadataTTL })},
	{long: "max-cache-size", value: "MiB", set: u64(0, false, func(o *Options) *uint64 { return &o.MaxCacheSize })},
	{long: "cache-xz", value: "BUCKET", set: func(o *Options, v string) error {
		o.CacheXZ = v
		return validateBucket(v)
	}},
	{long: "user-agent-prefix", value: "PREFIX", set: str(func(o *Options) *string { return &o.UserAgentPrefix })},
	{long: "sse", value: "SSE", set: choice([]string{"aws:kms", "aws:kms:dsse", "AES256"}, func(o *Options) *string { return &o.SSE })},
	{long: "sse-kms-key-id", value: "AWS_KMS_KEY_ARN", set: func(o *Options, v string) error {
		if !strings.HasPrefix(v, "arn:") || !strings.Contains(v, ":key") {
			return fmt.Errorf("KMS Key ARN is only accepted as a key identifier, Key Alias ARN is not accepted")
		}
		o.SSEKMSKeyID = v
		return nil
	}},
	{long: "upload-checksums", value: "ALGORITHM", set: choice([]string{"crc32c", "crc64nvme", "off"}, func(o *Options) *string { return &o.UploadChecksums })},
	{long: "infer-content-type", set: flag(func(o *Options) *bool { return &o.InferContentType })},
	{long: "otlp-endpoint", value: "ENDPOINT", set: func(o *Options, v string) error {
		if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return fmt.Errorf("must be an http:// or https:// URL")
		}
		o.OTLPEndpoint = v
		return nil
	}},
	{long: "otlp-export-interval", value: "SECONDS", set: u64(1, false, func(o *Options) *uint64 { return &o.OTLPExportInterval })},
	{long: "bind", value: "NETWORK_INTERFACE", multi: true, set: func(o *Options, v string) error {
		o.Bind = append(o.Bind, v)
		return nil
	}},
	{long: "help", short: "h", set: flag(func(o *Options) *bool { return &o.Help })},
	{long: "version", short: "V", set: flag(func(o *Options) *bool { return &o.Version })},
}

func findSpec(long, short string) *optSpec {
	for _, s := range specs {
		if (long != "" && s.long == long) || (short != "" && s.short == short) {
			return s
		}
	}
	return nil
}

// parseArgs parses args (without the program name) with clap's rules as mount-s3 configures
// them: options before, between or after the two positionals; "--key=value" and "--key value";
// short flags may be bundled ("-fd") and -l takes a value ("-l DIR", "-lDIR", "-l=DIR");
// "--" ends option parsing. --help and --version stop parsing where they appear (Help /
// Version is set and the rest is not validated). Any other problem is a *usageError.
func parseArgs(args []string) (*Options, error) {
	o := &Options{}
	seen := map[*optSpec]int{} // spec -> position of first use
	var positionals []string
	apply := func(s *optSpec, v string, pos int) error {
		if _, dup := seen[s]; dup && !s.multi {
			return usagef("the argument '%s' cannot be used multiple times", s.display())
		}
		seen[s] = pos
		if err := s.set(o, v); err != nil {
			if errors.Is(err, errEmpty) {
				return usagef("a value is required for '%s' but none was supplied", s.display())
			}
			if pv, ok := err.(*possibleValues); ok {
				return &usageError{fmt.Sprintf("error: invalid value '%s' for '%s'\n  [possible values: %s]\n\nFor more information, try '--help'.\n",
					v, s.display(), strings.Join(pv.values, ", "))}
			}
			return &usageError{fmt.Sprintf("error: invalid value '%s' for '%s': %v\n\nFor more information, try '--help'.\n", v, s.display(), err)}
		}
		return nil
	}
	// value fetches the value of an option that was not given inline.
	value := func(s *optSpec, i *int) (string, error) {
		if *i+1 >= len(args) || (strings.HasPrefix(args[*i+1], "-") && args[*i+1] != "-") {
			return "", usagef("a value is required for '%s' but none was supplied", s.display())
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positionals = append(positionals, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, v, inline := strings.Cut(a[2:], "=")
			s := findSpec(name, "")
			if s == nil {
				return nil, usagef("unexpected argument '%s' found", a)
			}
			if s.value == "" && inline {
				return nil, usagef("unexpected value '%s' for '%s' found; no more were expected", v, s.display())
			}
			if s.value != "" && !inline {
				var err error
				if v, err = value(s, &i); err != nil {
					return nil, err
				}
			}
			if err := apply(s, v, i); err != nil {
				return nil, err
			}
		case strings.HasPrefix(a, "-") && a != "-":
			for j := 1; j < len(a); j++ {
				s := findSpec("", a[j:j+1])
				if s == nil {
					return nil, usagef("unexpected argument '-%s' found", a[j:j+1])
				}
				v := ""
				if s.value != "" {
					if rest := strings.TrimPrefix(a[j+1:], "="); rest != "" {
						v = rest
					} else {
						var err error
						if v, err = value(s, &i); err != nil {
							return nil, err
						}
					}
					j = len(a)
				}
				if err := apply(s, v, i); err != nil {
					return nil, err
				}
				if o.Help || o.Version {
					return o, nil
				}
			}
		default:
			positionals = append(positionals, a)
		}
		if o.Help || o.Version {
			return o, nil
		}
	}
	if len(positionals) > 2 {
		return nil, usagef("unexpected argument '%s' found", positionals[2])
	}
	if len(positionals) < 2 {
		missing := []string{"<BUCKET_NAME>", "<DIRECTORY>"}[len(positionals):]
		return nil, usagef("the following required arguments were not provided:\n  %s", strings.Join(missing, "\n  "))
	}
	o.Bucket, o.MountPoint = positionals[0], positionals[1]
	if err := validateBucket(o.Bucket); err != nil {
		return nil, &usageError{fmt.Sprintf("error: invalid value '%s' for '<BUCKET_NAME>': %v\n\nFor more information, try '--help'.\n", o.Bucket, err)}
	}
	if o.MountPoint == "" {
		return nil, usagef("a value is required for '<DIRECTORY>' but none was supplied")
	}
	// clap's env fallbacks count as given, for the relations too (Parser::add_env).
	for _, s := range specs {
		if _, given := seen[s]; given || s.env == "" {
			continue
		}
		if v, ok := os.LookupEnv(s.env); ok {
			if err := apply(s, v, len(args)); err != nil {
				return nil, err
			}
		}
	}
	return o, checkRelations(seen)
}

// checkRelations applies clap's conflicts_with / requires rules of mount-s3.
func checkRelations(seen map[*optSpec]int) error {
	has := func(long string) bool { _, ok := seen[findSpec(long, "")]; return ok }
	conflicts := [][2]string{
		{"allow-other", "allow-root"},
		{"read-part-size", "part-size"}, {"write-part-size", "part-size"},
		{"no-log", "log-directory"}, {"no-log", "debug"}, {"no-log", "debug-crt"}, {"no-log", "log-metrics"},
	}
	for _, c := range conflicts {
		if has(c[0]) && has(c[1]) {
			a, b := findSpec(c[0], ""), findSpec(c[1], "")
			if seen[a] < seen[b] { // clap names the later argument first
				a, b = b, a
			}
			return usagef("the argument '%s' cannot be used with '%s'", a.display(), b.display())
		}
	}
	requires := [][2]string{{"max-cache-size", "cache"}, {"sse-kms-key-id", "sse"}}
	for _, r := range requires {
		if has(r[0]) && !has(r[1]) {
			return usagef("the following required arguments were not provided:\n  %s", findSpec(r[1], "").display())
		}
	}
	return nil
}

const helpText = `Mount an S3 bucket as a file system (test stand-in for mount-s3)

` + usageLine + `

Arguments:
  <BUCKET_NAME>  Name of bucket to mount
  <DIRECTORY>    Directory or FUSE file descriptor (/dev/fd/N) to mount the bucket at

Options (see the real mount-s3 --help for their meaning):
  --prefix <PREFIX>  --region <REGION>  --endpoint-url <ENDPOINT_URL>  --force-path-style
  --transfer-acceleration  --dual-stack  --requester-pays  --bucket-type <BUCKET_TYPE>
  --no-sign-request  --profile <PROFILE>  --read-only  --storage-class <STORAGE_CLASS>
  --allow-delete  --allow-overwrite  --incremental-upload  --auto-unmount  --allow-root
  --allow-other  --maximum-throughput-gbps <N>  --max-threads <N>  --part-size <SIZE>
  --read-part-size <SIZE>  --write-part-size <SIZE>  --uid <UID>  --gid <GID>
  --dir-mode <DIR_MODE>  --file-mode <FILE_MODE>  -f, --foreground
  --expected-bucket-owner <AWS_ACCOUNT_ID>  -l, --log-directory <DIRECTORY>  --log-metrics
  -d, --debug  --debug-crt  --no-log  --cache <DIRECTORY>
  --metadata-ttl <SECONDS|indefinite|minimal>  --negative-metadata-ttl <SECONDS|indefinite|minimal>
  --max-cache-size <MiB>  --cache-xz <BUCKET>  --user-agent-prefix <PREFIX>  --sse <SSE>
  --sse-kms-key-id <AWS_KMS_KEY_ARN>  --upload-checksums <ALGORITHM>  --bind <NETWORK_INTERFACE>
  --infer-content-type  --memory-target <MiB>  --ca-bundle <PATH>  --otlp-endpoint <ENDPOINT>
  --otlp-export-interval <SECONDS>
  -h, --help  -V, --version
`
