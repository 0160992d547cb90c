package mountargs

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// FuzzBuild checks the parser's safety properties on arbitrary input: it never panics, every
// error wraps ErrInvalid, and every accepted argument is a known option whose rendered form
// holds no whitespace, control character or shell metacharacter (the driver's own
// --user-agent-prefix excepted), and forbidden options never get through.
func FuzzBuild(f *testing.F) {
	for _, s := range []string{"allow-delete", "--uid=1000", "uid 1000", "-o x", "--endpoint-url=http://x", "--prefix=a/b/", "metadata-ttl=indefinite", "--cache /tmp/c", "--aws-max-attempts=3", "-d", "\x00", "--region=$(id)"} {
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		res, err := Build(Options{MountFlags: []string{a, b}, UserAgentPrefix: "ua x"})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, arg := range res.Args.List() {
			key, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			sp, ok := specs[key]
			if !ok {
				t.Fatalf("unknown option %q accepted", arg)
			}
			if key == "user-agent-prefix" {
				continue
			}
			if sp.forbidden != "" {
				t.Fatalf("forbidden option %q accepted", arg)
			}
			if strings.ContainsFunc(value, unicode.IsSpace) || strings.ContainsFunc(value, unicode.IsControl) || strings.ContainsAny(value, shellMeta) {
				t.Fatalf("unsafe value accepted: %q", arg)
			}
		}
		for _, e := range res.Env {
			if !strings.HasPrefix(e, "AWS_MAX_ATTEMPTS=") || strings.ContainsAny(e, shellMeta+" \n") {
				t.Fatalf("unexpected env %q", e)
			}
		}
	})
}
