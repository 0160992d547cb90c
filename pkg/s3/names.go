package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// Limits of derived bucket names.
const (
	// MaxPrefix is the longest bucket name prefix accepted: it leaves room for at least 14
	// characters of the volume name next to the hash in a shortened name.
	MaxPrefix = 32

	minBucket = 3
	maxBucket = 63
	// hashLen hex digits (64 bits) of SHA-256 end a shortened name.
	hashLen = 16
)

// Names S3 stores reserve (AWS rules; other stores have a subset of them).
var (
	reservedPrefixes = []string{"xn--", "sthree-", "amzn-s3-demo-"}
	reservedSuffixes = []string{"-s3alias", "--ol-s3", "--x-s3", "--table-s3"}
)

// ValidatePrefix checks a bucket name prefix (StorageClass parameter bucketNamePrefix): empty,
// or at most MaxPrefix characters of lowercase letters, digits and hyphens, starting with a
// letter or digit and not with a name S3 reserves. A trailing hyphen is allowed and usual
// ("team-a-"): the bucket name is the prefix immediately followed by the volume name.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxPrefix {
		return fmt.Errorf("%w: prefix is longer than %d characters", ErrInvalidBucketName, MaxPrefix)
	}
	if !isLowerAlnum(prefix[0]) {
		return fmt.Errorf("%w: prefix %q must start with a lowercase letter or a digit", ErrInvalidBucketName, prefix)
	}
	for i := 0; i < len(prefix); i++ {
		if !isLowerAlnum(prefix[i]) && prefix[i] != '-' {
			return fmt.Errorf("%w: prefix %q may only hold lowercase letters, digits and '-' (no dots: they break TLS with virtual-hosted addressing)", ErrInvalidBucketName, prefix)
		}
	}
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(prefix, r) {
			return fmt.Errorf("%w: prefix %q starts a name S3 reserves (%s)", ErrInvalidBucketName, prefix, r)
		}
	}
	return nil
}

// BucketName derives the bucket of a CSI volume from the volume name and a validated prefix.
// The result is deterministic, so a retried CreateVolume finds the bucket the first attempt
// made. It is always a valid S3 bucket name of lowercase letters, digits and hyphens (never
// dots):
//
//   - prefix+name, when that already is such a name (the usual "pvc-<uid>" volume names: the
//     bucket is named like the PersistentVolume);
//   - otherwise prefix + the name lowercased, every run of other characters replaced by one
//     hyphen, shortened to fit, + "-" + the first 16 hex digits of the name's SHA-256. The hash
//     keeps names that differ only in case, punctuation or beyond the cut apart.
//
// Two different names could only map to one bucket if one of them was made to look like the
// other's shortened form; the ownership tags (see CreateBucket) still keep a volume from
// taking over a bucket created for another one.
func BucketName(prefix, volumeName string) (string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return "", err
	}
	if volumeName == "" {
		return "", fmt.Errorf("%w: the volume name is empty", ErrInvalidBucketName)
	}
	if name := prefix + volumeName; ValidBucketName(name) == nil {
		return name, nil
	}
	sum := sha256.Sum256([]byte(volumeName))
	hash := hex.EncodeToString(sum[:])[:hashLen]
	room := maxBucket - len(prefix) - 1 - hashLen
	body := strings.Trim(sanitize(volumeName), "-")
	if len(body) > room {
		body = strings.TrimRight(body[:room], "-")
	}
	name := prefix + hash
	if body != "" {
		name = prefix + body + "-" + hash
	}
	if err := ValidBucketName(name); err != nil {
		return "", fmt.Errorf("volume name %q: %w (set a bucketNamePrefix)", volumeName, err)
	}
	return name, nil
}

// ValidateBucketName applies S3's naming rules for a bucket that may already exist (the one
// rule set of the project: the node plugin checks static volumes' bucketName with it, and
// ValidBucketName builds on it): 3-63 characters of lowercase letters, digits, '.' and '-',
// starting and ending with a letter or digit, no "..", ".-" or "-.", not an IPv4 address, and
// no prefix or suffix S3 reserves. Errors wrap ErrInvalidBucketName and quote the name.
func ValidateBucketName(name string) error {
	if len(name) < minBucket || len(name) > maxBucket {
		return fmt.Errorf("%w: %q is not %d-%d characters long", ErrInvalidBucketName, truncate(name), minBucket, maxBucket)
	}
	for i := 0; i < len(name); i++ {
		if !isLowerAlnum(name[i]) && name[i] != '-' && name[i] != '.' {
			return fmt.Errorf("%w: %q may only hold lowercase letters, digits, '.' and '-'", ErrInvalidBucketName, name)
		}
	}
	if !isLowerAlnum(name[0]) || !isLowerAlnum(name[len(name)-1]) {
		return fmt.Errorf("%w: %q must start and end with a lowercase letter or a digit", ErrInvalidBucketName, name)
	}
	for _, bad := range []string{"..", ".-", "-."} {
		if strings.Contains(name, bad) {
			return fmt.Errorf("%w: %q must not contain %q", ErrInvalidBucketName, name, bad)
		}
	}
	if ip, err := netip.ParseAddr(name); err == nil && ip.Is4() {
		return fmt.Errorf("%w: %q must not be an IP address", ErrInvalidBucketName, name)
	}
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(name, r) {
			return fmt.Errorf("%w: %q starts with %q, which S3 reserves", ErrInvalidBucketName, name, r)
		}
	}
	for _, r := range reservedSuffixes {
		if strings.HasSuffix(name, r) {
			return fmt.Errorf("%w: %q ends with %q, which S3 reserves", ErrInvalidBucketName, name, r)
		}
	}
	return nil
}

// ValidBucketName reports whether name is a bucket name this package creates or accepts in a
// volume id: ValidateBucketName's rules, and no dots (they break TLS with virtual-hosted
// addressing).
func ValidBucketName(name string) error {
	if err := ValidateBucketName(name); err != nil {
		return err
	}
	if strings.Contains(name, ".") {
		return fmt.Errorf("%w: %q may only hold lowercase letters, digits and '-'", ErrInvalidBucketName, name)
	}
	return nil
}

// truncate shortens what an error quotes of a (possibly huge) name.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// sanitize lowercases s and turns every run of characters other than a-z and 0-9 into one '-'.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r < 0x80 && isLowerAlnum(byte(r)) {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
