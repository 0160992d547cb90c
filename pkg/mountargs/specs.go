package mountargs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

type kind int

const (
	flag kind = iota + 1
	valued
	// ownedPath is an option that takes a path on the host, which the driver chooses: the user
	// writes it without a value (a value is refused), and the mounter fills in a directory it
	// owns (see Args.List and SetOwnedPaths).
	ownedPath
)

// spec describes one mount-s3 option: whether it takes a value, how the value is checked, and,
// for options the driver refuses, why.
type spec struct {
	kind      kind
	check     func(string) error
	forbidden string
	// multi marks an option mount-s3 takes more than once (--bind): its values are kept in
	// the order given and rendered as one option each.
	multi bool
}

// shortAliases maps mount-s3's single-letter options to their long names.
var shortAliases = map[string]string{"d": "debug", "l": "log-directory", "f": "foreground", "h": "help", "V": "version"}

// specs is the allow-list, in step with mount-s3 1.24.0's CLI (awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3/src/cli.rs, CliArgs; tests/mounts3/CONFORMANCE.md has each option's source).
var specs = map[string]spec{
	// Bucket options.
	"prefix":                {kind: valued, check: prefix},
	"region":                {kind: valued, check: token(64)},
	"force-path-style":      {kind: flag},
	"transfer-acceleration": {kind: flag, forbidden: "mount-s3 cannot use S3 Transfer Acceleration with the driver's endpoint: the endpoint is set cluster-wide (a custom endpoint, path-style addressing), which S3's endpoint rules refuse to combine with acceleration"},
	"dual-stack":            {kind: flag, forbidden: "mount-s3 cannot use dual-stack endpoints with the driver's endpoint: the endpoint is set cluster-wide (a custom endpoint), which S3's endpoint rules refuse to combine with dual-stack"},
	"requester-pays":        {kind: flag},
	"bucket-type":           {kind: valued, check: oneOf("general-purpose", "directory")},
	"storage-class":         {kind: valued, check: token(64)},
	"expected-bucket-owner": {kind: valued, check: token(64)},
	"sse":                   {kind: valued, check: oneOf("aws:kms", "aws:kms:dsse", "AES256")},
	"sse-kms-key-id":        {kind: valued, check: kmsKeyARN},
	"upload-checksums":      {kind: valued, check: oneOf("crc32c", "crc64nvme", "off")},
	"ca-bundle":             {kind: valued, forbidden: "the trusted CA bundle is set cluster-wide (driver flag --s3-ca-bundle, Helm tls.*)"},
	"endpoint-url":          {kind: valued, forbidden: "the S3 endpoint is set cluster-wide by the administrator (driver flag --s3-endpoint-url, Helm s3.endpointUrl)"},
	// Credentials.
	"no-sign-request": {kind: flag},
	"profile":         {kind: valued, forbidden: "credentials are managed by the driver; use the volume attribute authenticationSource"},
	// Mount options.
	"read-only":             {kind: flag},
	"allow-delete":          {kind: flag},
	"allow-overwrite":       {kind: flag},
	"incremental-upload":    {kind: flag},
	"auto-unmount":          {kind: flag},
	"allow-root":            {kind: flag},
	"allow-other":           {kind: flag},
	"uid":                   {kind: valued, check: idRange},
	"gid":                   {kind: valued, check: idRange},
	"dir-mode":              {kind: valued, check: permBits},
	"file-mode":             {kind: valued, check: permBits},
	"foreground":            {kind: flag, forbidden: "the driver decides how mount-s3 runs"},
	"negative-metadata-ttl": {kind: valued, check: ttl},
	"metadata-ttl":          {kind: valued, check: ttl},
	// Client options.
	"maximum-throughput-gbps": {kind: valued, check: uintMin(1)},
	"max-threads":             {kind: valued, check: uintMin(1)},
	"part-size":               {kind: valued, check: partSize},
	"read-part-size":          {kind: valued, check: partSize},
	"write-part-size":         {kind: valued, check: partSize},
	"bind":                    {kind: valued, check: ifName, multi: true},
	"memory-target":           {kind: valued, check: memoryTarget},
	"max-memory-target":       {kind: valued, forbidden: "mount-s3 1.24.0 has no such option (no release binary ever had it): it is memory-target now; write memory-target=<MiB> (at least 512), or leave it out: the driver sets it from the mount's memory limit (docs/sizing.md)"},
	// Logging.
	"log-directory": {kind: valued, forbidden: "it names a host path (mount-s3 runs as root); mount-s3's log is in the node's journal (systemd mode: journalctl -u mount-s3-<id>.service) or the Mountpoint Pod's log (pod mode); use debug for more detail"},
	"log-metrics":   {kind: flag},
	"debug":         {kind: flag},
	"debug-crt":     {kind: flag},
	"no-log":        {kind: flag},
	// OpenTelemetry metrics export.
	"otlp-endpoint":        {kind: valued, forbidden: "it makes mount-s3 send metrics from the node to an address the volume names; the driver does not export mount-s3's metrics"},
	"otlp-export-interval": {kind: valued, forbidden: "it goes with otlp-endpoint, which is not allowed"},
	// Caching.
	"cache":          {kind: ownedPath},
	"max-cache-size": {kind: valued, check: uintMin(0)},
	"cache-xz":       {kind: valued, check: bucketName},
	// Advanced.
	"user-agent-prefix":  {kind: valued, forbidden: "the driver sets the user agent"},
	"infer-content-type": {kind: flag},
	"aws-max-attempts":   {kind: valued, check: uintMin(1)},
	// Not mount options at all.
	"help":    {kind: flag, forbidden: "not a mount option"},
	"version": {kind: flag, forbidden: "not a mount option"},
	"o":       {kind: valued, forbidden: "fstab-style -o is not supported; list each mount-s3 option as its own mountOptions entry"},
}

func uintMin(min uint64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return errors.New("not a non-negative decimal integer")
		}
		if n < min {
			return fmt.Errorf("must be at least %d", min)
		}
		return nil
	}
}

// Part sizes mount-s3 accepts (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-client/src/
// s3_crt_client.rs, S3CrtClientInner::new: refused at start-up otherwise, exit 1).
const (
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
)

func partSize(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < MinPartSize || n > MaxPartSize {
		return fmt.Errorf("must be a number of bytes between %d (5 MiB) and %d (5 GiB)", MinPartSize, MaxPartSize)
	}
	return nil
}

// MinMemoryTargetMiB is the least --memory-target mount-s3 takes (clap range(512..),
// awslabs/mountpoint-s3@58817cab2:mountpoint-s3/src/cli.rs, CliArgs.memory_target).
const MinMemoryTargetMiB = 512

func memoryTarget(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < MinMemoryTargetMiB {
		return fmt.Errorf("must be a number of MiB, at least %d", MinMemoryTargetMiB)
	}
	return nil
}

// DataBufferBudgetMiB is what mount-s3 keeps for data buffers out of a memory target: the target
// less max(128 MiB, target/8) for its own overhead
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/memory/limiter.rs,
// data_buffer_budget_for). With an explicit target, a read part above it fails start-up.
func DataBufferBudgetMiB(targetMiB uint64) uint64 {
	return targetMiB - max(128, targetMiB/8)
}

func idRange(v string) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return errors.New("must be a decimal id between 1 and 4294967295")
	}
	return nil
}

func permBits(v string) error {
	n, err := strconv.ParseUint(v, 8, 16)
	if err != nil || len(v) > 4 || n > 0o777 {
		return errors.New("must be octal permission bits between 000 and 777")
	}
	return nil
}

// maxTTL is mount-s3's bound on a TTL given in seconds (about 100 years).
const maxTTL = 3153600000

func ttl(v string) error {
	if v == "indefinite" || v == "minimal" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return errors.New("must be a number of seconds, indefinite or minimal")
	}
	if n > maxTTL {
		return fmt.Errorf("must be at most %d seconds (about 100 years); use indefinite for no expiry", maxTTL)
	}
	return nil
}

// kmsKeyARN checks --sse-kms-key-id: mount-s3 takes a KMS key ARN (arn:...:key/<id>), not a
// key id, an alias or an alias ARN.
func kmsKeyARN(v string) error {
	if err := token(2048)(v); err != nil {
		return err
	}
	if !strings.HasPrefix(v, "arn:") || !strings.Contains(v, ":key/") {
		return errors.New("must be a KMS key ARN (arn:aws:kms:<region>:<account>:key/<key-id>); key ids, aliases and alias ARNs are refused by mount-s3")
	}
	return nil
}

// bucketName checks a bucket name as mount-s3 does for --cache-xz: 3 to 63 letters, digits,
// '-', '.' and '_'.
func bucketName(v string) error {
	if len(v) < 3 || len(v) > 63 || !safetext.IsWord(v, "-._") {
		return errors.New("must be a bucket name: 3 to 63 letters, digits, '-', '.' and '_'")
	}
	return nil
}

func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(values, ", "))
	}
}

// tokenChars are the characters accepted in free-form values (regions, ARNs, storage classes).
func isTokenChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/=,@+%-", r)
}

func token(maxLen int) func(string) error {
	return func(v string) error {
		if len(v) > maxLen {
			return fmt.Errorf("longer than %d characters", maxLen)
		}
		if strings.IndexFunc(v, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
			return errors.New("only letters, digits and ._:/=,@+%- are allowed")
		}
		return nil
	}
}

func prefix(v string) error {
	if err := token(1024)(v); err != nil {
		return err
	}
	if strings.HasPrefix(v, "/") || !strings.HasSuffix(v, "/") {
		return errors.New("must not start with '/' and must end with '/' (for example data/)")
	}
	return nil
}

// ifName checks a network interface name (mount-s3 --bind): 1-15 characters of letters,
// digits and "-_.:@", not "." or "..": what the kernel accepts, and never a path.
func ifName(v string) error {
	if len(v) > 15 || v == "." || v == ".." {
		return errors.New("must be a network interface name of at most 15 characters")
	}
	if !safetext.IsWord(v, "-_.:@") {
		return errors.New("must be a network interface name: letters, digits and -_.:@ only")
	}
	return nil
}

// KnownOptions lists, sorted, the long names of every option the policy knows: the mount-s3
// options it accepts or refuses with a reason, and the driver's own (aws-max-attempts). The
// conformance tests hold it against mount-s3's command line.
func KnownOptions() []string {
	return slices.Sorted(maps.Keys(specs))
}
