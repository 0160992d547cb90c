package mountargs

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const ua = "s3.csi.scality.com/test"

func TestBuildAccepts(t *testing.T) {
	base := []string{"--force-path-style", "--user-agent-prefix=" + ua}
	withBase := func(extra ...string) []string {
		out := append(append([]string{}, extra...), base...)
		return sortedCopy(out)
	}
	tests := []struct {
		name     string
		in       Options
		wantArgs []string
		wantEnv  []string
	}{
		{name: "no options", in: Options{}, wantArgs: withBase()},
		{name: "bare key gets dashes", in: Options{MountFlags: []string{"allow-delete"}}, wantArgs: withBase("--allow-delete")},
		{name: "single dash", in: Options{MountFlags: []string{"-allow-delete"}}, wantArgs: withBase("--allow-delete")},
		{name: "key=value", in: Options{MountFlags: []string{"--uid=1000"}}, wantArgs: withBase("--uid=1000")},
		{name: "key value", in: Options{MountFlags: []string{"uid 1000"}}, wantArgs: withBase("--uid=1000")},
		{name: "surrounding space trimmed", in: Options{MountFlags: []string{"  --region=eu-west-1 "}}, wantArgs: withBase("--region=eu-west-1")},
		{name: "short alias", in: Options{MountFlags: []string{"-d"}}, wantArgs: withBase("--debug")},
		{name: "duplicate identical", in: Options{MountFlags: []string{"allow-delete", "--allow-delete"}}, wantArgs: withBase("--allow-delete")},
		{name: "force-path-style by user is fine", in: Options{MountFlags: []string{"force-path-style"}}, wantArgs: withBase()},
		{name: "read only", in: Options{ReadOnly: true}, wantArgs: withBase("--read-only")},
		{name: "read only set by user", in: Options{MountFlags: []string{"read-only"}}, wantArgs: withBase("--read-only")},
		{name: "fsGroup defaults", in: Options{FSGroup: "2000"}, wantArgs: withBase("--allow-other", "--dir-mode=770", "--file-mode=660", "--gid=2000")},
		{name: "fsGroup keeps user choices", in: Options{FSGroup: "2000", MountFlags: []string{"gid=3000", "dir-mode=750", "file-mode=0640"}},
			wantArgs: withBase("--allow-other", "--dir-mode=750", "--file-mode=0640", "--gid=3000")},
		{name: "fsGroup with allow-root", in: Options{FSGroup: "2000", MountFlags: []string{"allow-root"}},
			wantArgs: withBase("--allow-root", "--dir-mode=770", "--file-mode=660", "--gid=2000")},
		{name: "aws-max-attempts to env", in: Options{MountFlags: []string{"--aws-max-attempts=5"}}, wantArgs: withBase(), wantEnv: []string{"AWS_MAX_ATTEMPTS=5"}},
		{name: "values", in: Options{MountFlags: []string{"prefix=data/2024/", "metadata-ttl=indefinite", "negative-metadata-ttl 30", "cache", "max-cache-size=512", "sse=aws:kms", "sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:key/abc-def", "storage-class=STANDARD", "part-size=16777216", "bucket-type=general-purpose", "upload-checksums=off"}},
			wantArgs: withBase("--prefix=data/2024/", "--metadata-ttl=indefinite", "--negative-metadata-ttl=30", "--cache", "--max-cache-size=512", "--sse=aws:kms", "--sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:key/abc-def", "--storage-class=STANDARD", "--part-size=16777216", "--bucket-type=general-purpose", "--upload-checksums=off")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.UserAgentPrefix = ua
			got, err := Build(tc.in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(tc.wantArgs, got.Args.List()); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnv, got.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func sortedCopy(in []string) []string {
	var a Args
	for _, s := range in {
		k, v, _ := strings.Cut(strings.TrimPrefix(s, "--"), "=")
		a.Set(k, v)
	}
	return a.List()
}

func TestBuildRefuses(t *testing.T) {
	tests := []struct {
		name       string
		flags      []string
		wantOption string // must appear in the error
		wantReason string
	}{
		{"endpoint-url", []string{"--endpoint-url=http://evil:80"}, "endpoint-url", "administrator"},
		{"endpoint-url bare", []string{"endpoint-url http://evil"}, "endpoint-url", "administrator"},
		{"profile", []string{"profile=other"}, "profile", "authenticationSource"},
		{"ca bundle", []string{"--ca-bundle=/tmp/evil.pem"}, "ca-bundle", "cluster-wide"},
		{"foreground", []string{"--foreground"}, "foreground", "not allowed"},
		{"short f", []string{"-f"}, "-f", "not allowed"},
		{"fstab -o", []string{"-o allow_other"}, "-o", "fstab-style"},
		{"help", []string{"--help"}, "help", "not a mount option"},
		{"version", []string{"-V"}, "-V", "not a mount option"},
		{"user agent", []string{"user-agent-prefix=x"}, "user-agent-prefix", "driver sets"},
		{"unknown", []string{"--no-such-option"}, "no-such-option", "unknown"},
		{"semicolon", []string{"--prefix=a/;rm -rf /"}, "prefix", "whitespace"},
		{"dollar", []string{"--region=$(id)"}, "region", "metacharacter"},
		{"backtick", []string{"--storage-class=`id`"}, "storage-class", "metacharacter"},
		{"pipe", []string{"--region=eu|x"}, "region", "metacharacter"},
		{"newline", []string{"--allow-delete\n--endpoint-url=x"}, "allow-delete", "control characters"},
		{"tab in value", []string{"--region=eu\twest"}, "region", "control characters"},
		{"space in value", []string{"--region eu west"}, "region", "whitespace"},
		{"empty", []string{"  "}, "", "empty"},
		{"triple dash", []string{"---allow-delete"}, "allow-delete", "dashes"},
		{"flag with value", []string{"allow-delete=true"}, "allow-delete", "takes no value"},
		{"missing value", []string{"--uid"}, "uid", "needs a value"},
		{"empty value", []string{"--uid="}, "uid", "needs a value"},
		{"uid zero", []string{"uid=0"}, "uid", "between 1 and"},
		{"uid not number", []string{"uid=root"}, "uid", "between 1 and"},
		{"uid too big", []string{"uid=4294967296"}, "uid", "between 1 and"},
		{"bad mode", []string{"dir-mode=888"}, "dir-mode", "octal"},
		{"mode too wide", []string{"file-mode=1777"}, "file-mode", "octal"},
		{"bad ttl", []string{"metadata-ttl=forever"}, "metadata-ttl", "seconds"},
		{"prefix leading slash", []string{"prefix=/data/"}, "prefix", "end with '/'"},
		{"prefix no trailing slash", []string{"prefix=data"}, "prefix", "end with '/'"},
		{"relative cache", []string{"cache=tmp/cache"}, "cache", "takes no path"},
		{"dotdot cache", []string{"cache=/var/../etc"}, "cache", "takes no path"},
		{"bad sse", []string{"sse=rot13"}, "sse", "one of"},
		{"conflict allow-other/root", []string{"allow-other", "allow-root"}, "allow-root", "cannot be combined"},
		{"conflict part sizes", []string{"part-size=8388608", "read-part-size=8388608"}, "read-part-size", "cannot be combined"},
		{"sse AES256 with a KMS key", []string{"sse=AES256", "sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:key/k"}, "sse-kms-key-id", "cannot be used with --sse AES256"},
		{"read part above the memory budget", []string{"memory-target=512", "read-part-size=403701760"}, "read-part-size", "exceeds the 384 MiB"},
		{"part above the memory budget", []string{"memory-target=1024", "part-size=940572672"}, "part-size", "exceeds the 896 MiB"},
		{"requires cache", []string{"max-cache-size=10"}, "max-cache-size", "requires --cache"},
		{"requires sse", []string{"sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:key/k"}, "sse-kms-key-id", "requires --sse"},
		{"duplicate different", []string{"uid=1", "uid=2"}, "uid=2", "more than once"},
		{"max attempts zero", []string{"aws-max-attempts=0"}, "aws-max-attempts", "at least 1"},
		{"max attempts twice", []string{"aws-max-attempts=1", "aws-max-attempts=2"}, "aws-max-attempts", "more than once"},
		{"non utf8", []string{"--region=\xff\xfe"}, "region", "UTF-8"},
		{"oversized", []string{"--prefix=" + strings.Repeat("a", MaxOptionLen) + "/"}, "prefix", "longer than"},
		{"too many", make([]string, MaxOptions+1), "options", "too many"},
		{"unicode key", []string{"--allow‐delete"}, "allow", "not a mount-s3 option name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(Options{MountFlags: tc.flags, UserAgentPrefix: ua})
			if err == nil {
				t.Fatalf("Build(%q) succeeded, want an error", tc.flags)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if !strings.Contains(e.Option, tc.wantOption) {
				t.Errorf("error option %q does not name %q", e.Option, tc.wantOption)
			}
			if !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("error %q does not contain %q", err, tc.wantReason)
			}
		})
	}
}

func TestValidateGID(t *testing.T) {
	for _, ok := range []string{"1", "1000", "4294967295"} {
		if err := ValidateGID(ok); err != nil {
			t.Errorf("ValidateGID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "abc", "4294967296", "1 2", "0x10"} {
		if err := ValidateGID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateGID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestArgsSetOperations(t *testing.T) {
	var a Args
	a.Set("uid", "1")
	a.SetIfAbsent("uid", "2")
	a.SetIfAbsent("allow-delete", "")
	c := a.Clone()
	if v, ok := a.Remove("uid"); !ok || v != "1" {
		t.Fatalf("Remove(uid) = %q, %v", v, ok)
	}
	if diff := cmp.Diff([]string{"--allow-delete"}, a.List()); diff != "" {
		t.Errorf("after remove (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"--allow-delete", "--uid=1"}, c.List()); diff != "" {
		t.Errorf("clone changed with original (-want +got):\n%s", diff)
	}
}

// TestBuildRepeatedBind: --bind is the one option mount-s3 takes more than once; each value is
// kept as an option of its own (List sorts them like every option, so the same volume always
// renders the same command line).
func TestBuildRepeatedBind(t *testing.T) {
	r, err := Build(Options{MountFlags: []string{"bind=eth1", "--bind eth0", "bind=eth1"}})
	if err != nil {
		t.Fatal(err)
	}
	var binds []string
	for _, a := range r.Args.List() {
		if strings.HasPrefix(a, "--bind") {
			binds = append(binds, a)
		}
	}
	if want := []string{"--bind=eth0", "--bind=eth1", "--bind=eth1"}; !slices.Equal(binds, want) {
		t.Errorf("binds = %q, want %q", binds, want)
	}
}

func TestBoundCache(t *testing.T) {
	build := func(flags ...string) Args {
		t.Helper()
		b, err := Build(Options{MountFlags: flags})
		if err != nil {
			t.Fatal(err)
		}
		return b.Args
	}
	for _, tc := range []struct {
		name  string
		args  Args
		bound uint64
		want  string // the --max-cache-size value, "" when absent
	}{
		{"no cache", build("allow-delete"), 900, ""},
		{"no bound", build("cache"), 0, ""},
		{"set", build("cache"), 900, "900"},
		{"lowered", build("cache", "max-cache-size=5000"), 900, "900"},
		{"kept", build("cache", "max-cache-size=100"), 900, "100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.args.List()
			got, _ := tc.args.BoundCache(tc.bound).Get("max-cache-size")
			if got != tc.want {
				t.Errorf("--max-cache-size = %q, want %q", got, tc.want)
			}
			if !slices.Equal(before, tc.args.List()) {
				t.Errorf("BoundCache changed its receiver: %v → %v", before, tc.args.List())
			}
		})
	}
}
