package mountoptions

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// Files of a Mountpoint Pod's comm directory (an emptyDir the pod sees at /comm and the node
// plugin at <kubelet>/pods/<podUID>/volumes/kubernetes.io~empty-dir/comm).
const (
	// SocketName is the Unix socket the Mountpoint Pod listens on for Options.
	SocketName = "mount.sock"
	// ErrorFileName holds mount-s3's error output when it failed; the Mountpoint Pod writes it
	// atomically (rename) with mode 0644.
	ErrorFileName = "mount.err"
	// ExitFileName is created by the node plugin to retire the Mountpoint Pod: once it exists,
	// the pod exits 0 when mount-s3 ends (or at once when nothing was mounted yet).
	ExitFileName = "mount.exit"
	// CredentialsDirName is the directory the node plugin writes AWS profile files into.
	CredentialsDirName = "credentials"
)

// Limits of a message. They are far above what the node plugin sends (a few dozen options and
// variables) and keep a hostile or broken sender from making the receiver allocate much.
const (
	// MaxMessageSize is the largest accepted JSON message, in bytes.
	MaxMessageSize = 64 << 10
	// MaxArgs is the most mount-s3 arguments a message may carry.
	MaxArgs = 256
	// MaxEnv is the most environment entries a message may carry.
	MaxEnv = 128
	// MaxArgLen is the longest accepted argument, in bytes.
	MaxArgLen = 4096
	// MaxEnvLen is the longest accepted environment entry (KEY=VALUE), in bytes.
	MaxEnvLen = 4096
	// MaxEnvKeyLen is the longest accepted environment variable name, in bytes.
	MaxEnvKeyLen = 256
	// MaxBucketNameLen is the longest accepted bucket name (S3's legacy limit).
	MaxBucketNameLen = 255
	// MaxReasonLen bounds the reason text of a Nak reply, in bytes.
	MaxReasonLen = 1024
)

// Reply bytes: the receiver answers every message with exactly one of them.
const (
	// Ack means the options and the descriptor were accepted.
	Ack byte = 0x06
	// Nak means they were refused; the reason follows as text.
	Nak byte = 0x15
)

// Errors. Every error of this package wraps one of them (an error about a received connection
// wraps ErrReceive and the specific cause).
var (
	// ErrPathTooLong: the socket path does not fit a Unix socket address (107 bytes).
	ErrPathTooLong = errors.New("socket path too long")
	// ErrTooLarge: the JSON message exceeds MaxMessageSize.
	ErrTooLarge = errors.New("message too large")
	// ErrNoFD: the message came without a file descriptor (or Send got a negative one).
	ErrNoFD = errors.New("no file descriptor")
	// ErrTooManyFDs: the message came with more than one file descriptor.
	ErrTooManyFDs = errors.New("more than one file descriptor")
	// ErrMalformed: the message is not one JSON object with the known fields only.
	ErrMalformed = errors.New("malformed message")
	// ErrInvalid: a field breaks the rules of Options.Validate.
	ErrInvalid = errors.New("invalid mount options")
	// ErrRejected: the receiver refused the message (Send); the reason is in the error text.
	ErrRejected = errors.New("mount options rejected by the Mountpoint Pod")
	// ErrNoAck: the receiver closed the connection without replying (Send).
	ErrNoAck = errors.New("no acknowledgement from the Mountpoint Pod")
	// ErrReceive marks an error about one received connection (Accept): its message was refused
	// or could not be read. The Listener stays usable; the caller may Accept again.
	ErrReceive = errors.New("receive mount options")
)

// Options is what the node plugin tells a Mountpoint Pod about one mount. The FUSE file
// descriptor travels next to it (SCM_RIGHTS), never in the JSON.
type Options struct {
	// BucketName is the bucket mount-s3 serves.
	BucketName string `json:"bucketName"`
	// Args are mount-s3's options ("--allow-delete", "--uid=1000", ...), without the bucket
	// and the mount point.
	Args []string `json:"args"`
	// Env is mount-s3's complete environment ("KEY=VALUE"); nothing else is passed to it.
	Env []string `json:"env"`
}

// Validate checks the rules both sides enforce and returns an error wrapping ErrInvalid that
// names the first broken one:
//   - BucketName: 3 to 255 bytes of letters, digits, '.', '-' and '_', starting and ending
//     with a letter or digit (looser than the node plugin's S3 naming rules, so an older
//     Mountpoint Pod never refuses a name a newer node accepts, but never an option or a path);
//   - Args: at most MaxArgs, each non-empty, valid UTF-8, without NUL or any other character
//     safetext refuses, at most MaxArgLen bytes;
//   - Env: at most MaxEnv entries "KEY=VALUE", each valid UTF-8, without such characters, at most MaxEnvLen
//     bytes; KEY is [A-Za-z_][A-Za-z0-9_]* of at most MaxEnvKeyLen bytes, given only once.
func (o Options) Validate() error {
	if err := validateBucketName(o.BucketName); err != nil {
		return err
	}
	if len(o.Args) > MaxArgs {
		return fmt.Errorf("%w: %d arguments, at most %d are accepted", ErrInvalid, len(o.Args), MaxArgs)
	}
	for i, a := range o.Args {
		if err := validateText(a, MaxArgLen); err != nil {
			return fmt.Errorf("%w: argument %d: %v", ErrInvalid, i, err)
		}
	}
	if len(o.Env) > MaxEnv {
		return fmt.Errorf("%w: %d environment entries, at most %d are accepted", ErrInvalid, len(o.Env), MaxEnv)
	}
	seen := make(map[string]bool, len(o.Env))
	for i, e := range o.Env {
		if err := validateText(e, MaxEnvLen); err != nil {
			return fmt.Errorf("%w: environment entry %d: %v", ErrInvalid, i, err)
		}
		key, _, ok := strings.Cut(e, "=")
		if !ok {
			return fmt.Errorf("%w: environment entry %d is not KEY=VALUE", ErrInvalid, i)
		}
		if !validEnvKey(key) {
			return fmt.Errorf("%w: environment entry %d: %q is not a valid variable name", ErrInvalid, i, truncate(key, 64))
		}
		if seen[key] {
			return fmt.Errorf("%w: environment variable %s is given more than once", ErrInvalid, key)
		}
		seen[key] = true
	}
	return nil
}

// EnvKeys returns the variable names of o.Env, in order: what may be logged of the environment.
func (o Options) EnvKeys() []string {
	keys := make([]string, 0, len(o.Env))
	for _, e := range o.Env {
		k, _, _ := strings.Cut(e, "=")
		keys = append(keys, k)
	}
	return keys
}

func validateBucketName(b string) error {
	if len(b) < 3 || len(b) > MaxBucketNameLen {
		return fmt.Errorf("%w: bucket name %q must be 3 to %d bytes long", ErrInvalid, truncate(b, 64), MaxBucketNameLen)
	}
	for i := 0; i < len(b); i++ {
		if c := b[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("%w: bucket name %q may only hold letters, digits, '.', '-' and '_'", ErrInvalid, truncate(b, 64))
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return fmt.Errorf("%w: bucket name %q must start and end with a letter or digit", ErrInvalid, b)
	}
	return nil
}

func validateText(s string, max int) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > max:
		return fmt.Errorf("%d bytes, at most %d are accepted", len(s), max)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return safetext.CheckRunes(s) // the project's one rule: no control, format or separator characters
}

func validEnvKey(k string) bool {
	if k == "" || len(k) > MaxEnvKeyLen || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !isAlnum(c) && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// parse turns one received message into Options: data is the payload, oob the control-message
// buffers received with it (one per read). It is pure (no system call), so it can be fuzzed:
// it returns the descriptor numbers found in oob even with an error and never closes them; the
// caller owns them. A nil error means exactly one descriptor and valid Options.
func parse(data []byte, oob ...[]byte) (Options, []int, error) {
	fds, err := rights(oob...)
	if err != nil {
		return Options{}, fds, err
	}
	switch {
	case len(fds) == 0:
		return Options{}, fds, ErrNoFD
	case len(fds) > 1:
		return Options{}, fds, fmt.Errorf("%w: got %d", ErrTooManyFDs, len(fds))
	}
	o, err := decode(data)
	return o, fds, err
}

// rights extracts the descriptors of the SCM_RIGHTS messages in the control buffers. It keeps
// the descriptors found before a malformed message, so the caller can close them.
func rights(oob ...[]byte) ([]int, error) {
	var fds []int
	var bad error
	for _, b := range oob {
		// Trailing bytes shorter than a header are padding, as for unix.ParseSocketControlMessage.
		for len(b) >= unix.CmsgLen(0) {
			hdr, data, rest, err := unix.ParseOneSocketControlMessage(b)
			if err != nil {
				return fds, fmt.Errorf("%w: bad control message: %v", ErrMalformed, err)
			}
			b = rest
			if hdr.Level != unix.SOL_SOCKET || hdr.Type != unix.SCM_RIGHTS {
				bad = fmt.Errorf("%w: unexpected control message (level %d, type %d)", ErrMalformed, hdr.Level, hdr.Type)
				continue
			}
			for i := 0; i+4 <= len(data); i += 4 {
				fds = append(fds, int(int32(binary.NativeEndian.Uint32(data[i:]))))
			}
		}
	}
	return fds, bad
}

// decode parses the JSON object strictly: exactly the known field names (case-sensitive, each
// at most once), nothing after the object, then Validate.
func decode(data []byte) (Options, error) {
	if len(data) > MaxMessageSize {
		return Options{}, fmt.Errorf("%w: %d bytes, at most %d are accepted", ErrTooLarge, len(data), MaxMessageSize)
	}
	var o Options
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Options{}, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Options{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return Options{}, fmt.Errorf("%w: field %q given more than once", ErrMalformed, truncate(key, 64))
		}
		seen[key] = true
		var dst any
		switch key {
		case "bucketName":
			dst = &o.BucketName
		case "args":
			dst = &o.Args
		case "env":
			dst = &o.Env
		default:
			return Options{}, fmt.Errorf("%w: unknown field %q", ErrMalformed, truncate(key, 64))
		}
		if err := dec.Decode(dst); err != nil {
			return Options{}, fmt.Errorf("%w: field %s: %v", ErrMalformed, key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return Options{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Options{}, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	return o, o.Validate()
}
