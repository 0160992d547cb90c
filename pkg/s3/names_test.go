package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestBucketName(t *testing.T) {
	long := "pvc-" + strings.Repeat("a", 100)
	tests := []struct {
		name, prefix, volume string
		want                 string // "" with wantErr
		wantErr              bool
	}{
		{"pv name kept", "", "pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c", "pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c", false},
		{"prefix", "team-a-", "pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c", "team-a-pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c", false},
		{"upper case hashed", "", "PVC-1", "pvc-1-" + hashOf("PVC-1"), false},
		{"punctuation runs", "", "a_b..c", "a-b-c-" + hashOf("a_b..c"), false},
		{"too short", "", "a", "a-" + hashOf("a"), false},
		{"nothing usable", "", "___", hashOf("___"), false},
		{"nothing usable with prefix", "k8s-", "___", "k8s-" + hashOf("___"), false},
		{"too long", "", long, long[:63-17] + "-" + hashOf(long), false},
		{"too long with prefix", "team-", long, "team-" + long[:63-17-5] + "-" + hashOf(long), false},
		{"cut on a hyphen", "", strings.Repeat("ab-", 30), strings.TrimRight(strings.Repeat("ab-", 30)[:46], "-") + "-" + hashOf(strings.Repeat("ab-", 30)), false},
		{"reserved suffix", "", "data-s3alias", "data-s3alias-" + hashOf("data-s3alias"), false},
		{"unicode", "", "volume-é", "volume-" + hashOf("volume-é"), false},
		{"reserved prefix avoided", "", "xn--abc", "xn-abc-" + hashOf("xn--abc"), false},
		{"reserved prefix refused", "", "sthree-data", "", true},
		{"empty name", "", "", "", true},
		{"bad prefix", "Team", "pvc-1", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BucketName(tc.prefix, tc.volume)
			if (err != nil) != tc.wantErr {
				t.Fatalf("BucketName(%q, %q) = %q, %v; want error %v", tc.prefix, tc.volume, got, err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidBucketName) {
					t.Errorf("error %v does not wrap ErrInvalidBucketName", err)
				}
				return
			}
			if got != tc.want {
				t.Errorf("BucketName(%q, %q) = %q, want %q", tc.prefix, tc.volume, got, tc.want)
			}
			if err := ValidBucketName(got); err != nil {
				t.Errorf("derived name is not valid: %v", err)
			}
		})
	}
}

// hashOf is the hash suffix of a shortened name: 16 hex digits of the name's SHA-256.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

func TestBucketNameDistinct(t *testing.T) {
	// Names that sanitize to the same text must still get different buckets.
	names := []string{"pvc-a", "PVC-A", "pvc_a", "pvc.a", "pvc--a", "Pvc-A", "pvc-a-", "-pvc-a"}
	seen := map[string]string{}
	for _, n := range names {
		b, err := BucketName("", n)
		if err != nil {
			t.Fatalf("BucketName(%q): %v", n, err)
		}
		if other, dup := seen[b]; dup {
			t.Errorf("%q and %q both map to %q", n, other, b)
		}
		seen[b] = n
	}
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"team-a-", true},
		{"k8s", true},
		{"0-", true},
		{strings.Repeat("a", MaxPrefix), true},
		{strings.Repeat("a", MaxPrefix+1), false},
		{"-team", false},
		{"Team", false},
		{"team.a", false},
		{"team_a", false},
		{"team a", false},
		{"xn--", false},
		{"sthree-x", false},
		{"é", false},
	}
	for _, tc := range tests {
		t.Run(tc.prefix, func(t *testing.T) {
			err := ValidatePrefix(tc.prefix)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidatePrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidBucketName) {
				t.Errorf("error does not wrap ErrInvalidBucketName: %v", err)
			}
		})
	}
}

func TestValidBucketName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"abc", true},
		{"pvc-1", true},
		{strings.Repeat("a", 63), true},
		{"ab", false},
		{strings.Repeat("a", 64), false},
		{"a.b.c", false},
		{"ABC", false},
		{"-abc", false},
		{"abc-", false},
		{"xn--abc", false},
		{"abc--ol-s3", false},
		{"abc-s3alias", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidBucketName(tc.name); (err == nil) != tc.ok {
				t.Fatalf("ValidBucketName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
}

// TestValidateBucketName: S3's rules for existing buckets (static volumes), the one rule set
// the node plugin also applies; dots are allowed here, unlike in names the driver creates.
func TestValidateBucketName(t *testing.T) {
	for name, ok := range map[string]bool{
		"abc": true, "my.bucket.name": true, "a-b.c-d": true, "1.2.3": true, strings.Repeat("a", 63): true,
		"ab": false, strings.Repeat("a", 64): false, "Abc": false, "a_b": false, "a b": false, "": false,
		"-abc": false, "abc-": false, ".abc": false, "abc.": false,
		"a..b": false, "a.-b": false, "a-.b": false,
		"192.168.1.1": false, "10.0.0.1": false,
		"xn--bucket": false, "sthree-bucket": false, "amzn-s3-demo-x": false,
		"bucket-s3alias": false, "bucket--ol-s3": false, "bucket--x-s3": false, "bucket--table-s3": false,
		"victim/../other": false, "--endpoint-url=x": false, "b\u202ec": false,
	} {
		err := ValidateBucketName(name)
		if (err == nil) != ok {
			t.Errorf("ValidateBucketName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidBucketName) {
			t.Errorf("ValidateBucketName(%q) = %v, does not wrap ErrInvalidBucketName", name, err)
		}
	}
}

// FuzzBucketName checks that every derivation is deterministic and yields a valid name.
func FuzzBucketName(f *testing.F) {
	for _, s := range []string{"pvc-1", "PVC", "a", "___", strings.Repeat("x-", 70), "xn--a", "é"} {
		f.Add("", s)
		f.Add("team-", s)
	}
	f.Fuzz(func(t *testing.T, prefix, volume string) {
		got, err := BucketName(prefix, volume)
		if err != nil {
			return
		}
		if err := ValidBucketName(got); err != nil {
			t.Fatalf("BucketName(%q, %q) = %q: %v", prefix, volume, got, err)
		}
		if !strings.HasPrefix(got, prefix) {
			t.Fatalf("BucketName(%q, %q) = %q lost the prefix", prefix, volume, got)
		}
		if again, _ := BucketName(prefix, volume); again != got {
			t.Fatalf("not deterministic: %q then %q", got, again)
		}
	})
}
