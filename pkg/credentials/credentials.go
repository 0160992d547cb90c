// Package credentials owns the static S3 credentials a mount uses: where they come from (the
// driver's own, or a per-volume Kubernetes Secret passed by kubelet), how they are validated,
// and how they reach mount-s3 without ever appearing in process arguments, unit properties or
// logs: as an AWS profile pair of files, referenced by AWS_PROFILE, AWS_CONFIG_FILE and
// AWS_SHARED_CREDENTIALS_FILE.
package credentials

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Source says where a volume's credentials come from (volume attribute authenticationSource).
type Source string

const (
	// SourceDriver uses the node plugin's own credentials (the default).
	SourceDriver Source = "driver"
	// SourceSecret uses the Secret named by the PV's nodePublishSecretRef.
	SourceSecret Source = "secret"
)

// Secret keys understood in NodePublish (and provisioner) secrets.
const (
	KeyAccessKeyID     = "access_key_id"
	KeySecretAccessKey = "secret_access_key"
	KeySessionToken    = "session_token"
)

// ErrInvalid is wrapped by every validation error. Messages name the offending key, never a value.
var ErrInvalid = errors.New("invalid credentials")

// ErrMissing is wrapped when a volume needs credentials from a Secret and the request has none.
var ErrMissing = errors.New("missing credentials")

// ErrNoDriverCredentials is wrapped when a volume uses the driver's credentials and the node
// plugin was started without any: a configuration problem of the node, not of the request.
var ErrNoDriverCredentials = errors.New("the driver has no credentials")

// Credentials are static S3 access keys. Formatting them with fmt prints only whether each
// part is set, never the values, so they are safe to pass around in structs that get logged.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

// String redacts every value.
func (c Credentials) String() string {
	set := func(s string) string {
		if s == "" {
			return "unset"
		}
		return "redacted"
	}
	return fmt.Sprintf("Credentials{AccessKeyID:%s SecretAccessKey:%s SessionToken:%s}", set(c.AccessKeyID), set(c.SecretAccessKey), set(c.SessionToken))
}

// GoString redacts every value (for %#v).
func (c Credentials) GoString() string { return c.String() }

// Limits and character sets. Access key ids of AWS and S3-compatible stores are short
// alphanumeric strings; secrets and session tokens are base64-like. Nothing here may contain
// whitespace, quotes or newlines, which keeps the profile files unambiguous.
const (
	maxAccessKeyID  = 128
	maxSecretKey    = 256
	maxSessionToken = 8192
)

func isKeyIDChar(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

func isSecretChar(r rune) bool { return isKeyIDChar(r) || r == '/' || r == '+' || r == '=' }

func isTokenChar(r rune) bool { return isSecretChar(r) || r == '%' }

func checkValue(key, v string, maxLen int, ok func(rune) bool) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, key)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, key)
	case len(v) > maxLen:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, key, maxLen)
	}
	for _, r := range v {
		if !ok(r) {
			return fmt.Errorf("%w: %s contains a character that is not allowed (letters, digits and %s only)", ErrInvalid, key, allowedPunct(ok))
		}
	}
	return nil
}

func allowedPunct(ok func(rune) bool) string {
	var out []rune
	for _, r := range "_-./+=%" {
		if ok(r) {
			out = append(out, r)
		}
	}
	return string(out)
}

// Validate checks every field: the key id and secret are required, the session token optional.
func (c Credentials) Validate() error {
	if err := checkValue(KeyAccessKeyID, c.AccessKeyID, maxAccessKeyID, isKeyIDChar); err != nil {
		return err
	}
	if err := checkValue(KeySecretAccessKey, c.SecretAccessKey, maxSecretKey, isSecretChar); err != nil {
		return err
	}
	if c.SessionToken != "" {
		return checkValue(KeySessionToken, c.SessionToken, maxSessionToken, isTokenChar)
	}
	return nil
}

// FromSecrets reads and validates credentials from CSI request secrets (a Kubernetes Secret's
// data as passed by kubelet or the provisioner). access_key_id and secret_access_key are
// required, session_token is optional. Keys listed in extraKeys are allowed and ignored here;
// any other key is refused, so a typo ("secret_key") is reported instead of silently ignored.
func FromSecrets(secrets map[string]string, extraKeys ...string) (Credentials, error) {
	if len(secrets) == 0 {
		return Credentials{}, fmt.Errorf("%w: the secret is empty", ErrMissing)
	}
	known := append([]string{KeyAccessKeyID, KeySecretAccessKey, KeySessionToken}, extraKeys...)
	unknown := 0
	for k := range secrets {
		if !slices.Contains(known, k) {
			unknown++
		}
	}
	if unknown > 0 {
		// Never the unknown keys' names: users paste values into key names.
		return Credentials{}, fmt.Errorf("%w: the secret has %d key(s) the driver does not accept (of %d); accepted keys: %q", ErrInvalid, unknown, len(secrets), known)
	}
	for _, k := range []string{KeyAccessKeyID, KeySecretAccessKey} {
		if _, ok := secrets[k]; !ok {
			return Credentials{}, fmt.Errorf("%w: the secret has no %s", ErrMissing, k)
		}
	}
	c := Credentials{AccessKeyID: secrets[KeyAccessKeyID], SecretAccessKey: secrets[KeySecretAccessKey], SessionToken: secrets[KeySessionToken]}
	if _, ok := secrets[KeySessionToken]; ok && c.SessionToken == "" {
		return Credentials{}, fmt.Errorf("%w: %s is empty", ErrInvalid, KeySessionToken)
	}
	if err := c.Validate(); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// Resolve returns the credentials a volume mounts with and the source they came from.
//   - source "" or "driver": the driver's credentials; nil when the driver has none, which is an
//     error (ErrNoDriverCredentials) unless anonymous is set (the volume mounts with --no-sign-request).
//   - source "secret": the request secrets, which must be present and valid; there is no
//     fallback to the driver's credentials.
//
// Any other source is ErrInvalid.
func Resolve(source string, secrets map[string]string, driver *Credentials, anonymous bool) (*Credentials, Source, error) {
	switch Source(source) {
	case "", SourceDriver:
		if driver == nil {
			if anonymous {
				return nil, SourceDriver, nil
			}
			return nil, SourceDriver, fmt.Errorf("%w: authenticationSource is driver but the node plugin has no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (set the driver's credential secret, use authenticationSource: secret, or mount with no-sign-request)", ErrNoDriverCredentials)
		}
		return driver, SourceDriver, nil
	case SourceSecret:
		c, err := FromSecrets(secrets, "region") // region is read by the provisioner, not the node
		if err != nil {
			return nil, SourceSecret, fmt.Errorf("authenticationSource is secret: %w (check the PV's nodePublishSecretRef)", err)
		}
		return &c, SourceSecret, nil
	default:
		return nil, "", fmt.Errorf("%w: authenticationSource %q is not one of driver, secret", ErrInvalid, source)
	}
}
