package proxyenv

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	good := []Config{
		{},
		{HTTPS: "http://proxy.example.com:3128"},
		{HTTPS: "https://10.0.0.1:3129/", HTTP: "http://[fd00::1]:3128", NoProxy: ".cluster.local,10.0.0.0/8,ring.example.com,*"},
	}
	for _, c := range good {
		if got, err := Parse(c); err != nil || got != c {
			t.Errorf("Parse(%+v) = %+v, %v; want it unchanged", c, got, err)
		}
	}
	// Spaces around entries (a common way to write the list) are accepted and removed: the
	// variables mount-s3 gets hold the plain list.
	spaced := Config{HTTPS: "http://p:1", NoProxy: " .cluster.local , 10.0.0.0/8, ring.example.com"}
	if got, err := Parse(spaced); err != nil || got.NoProxy != ".cluster.local,10.0.0.0/8,ring.example.com" {
		t.Errorf("Parse(%+v) = %+v, %v; want NoProxy without the spaces", spaced, got, err)
	}
	bad := []struct {
		c    Config
		want string
	}{
		{Config{HTTPS: "proxy.example.com:3128"}, "--https-proxy: \"proxy.example.com:3128\" is not a proxy URL"},
		{Config{HTTP: "socks5://proxy:1080"}, "--http-proxy: \"socks5://proxy:1080\" is not a proxy URL"},
		{Config{HTTPS: "http://user:secret@proxy:3128"}, "credentials in the proxy URL are not supported"},
		{Config{HTTPS: "http://proxy:3128/path"}, "has a path, query or fragment"},
		{Config{HTTPS: "http://proxy:3128\n"}, "not printable text"},
		{Config{HTTPS: "http://p:1", NoProxy: "a,,b"}, "--no-proxy: \"\" is not a host"},
		{Config{HTTPS: "http://p:1", NoProxy: "a b"}, "--no-proxy: \"a b\" is not a host"},
		{Config{HTTPS: "http://p:1", NoProxy: "http://x/"}, "--no-proxy: \"http://x/\" is not a host"},
	}
	for _, tc := range bad {
		_, err := Parse(tc.c)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%+v) = %v, want %q", tc.c, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the proxy's credentials: %v", err)
		}
	}
}

func TestEnvAndFunc(t *testing.T) {
	if env := (Config{NoProxy: "x"}).Env(); env != nil {
		t.Errorf("no proxy set, yet Env = %v", env)
	}
	c := Config{HTTPS: "http://proxy:3128", NoProxy: ".internal"}
	want := []string{"HTTPS_PROXY=http://proxy:3128", "https_proxy=http://proxy:3128", "NO_PROXY=.internal", "no_proxy=.internal"}
	if env := c.Env(); !slices.Equal(env, want) {
		t.Errorf("Env = %v, want %v", env, want)
	}
	for _, kv := range c.Env() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(Names, name) {
			t.Errorf("Env sets %s, which Names lacks (a unit would inherit it when unset)", name)
		}
	}
	f := c.Func()
	for host, proxied := range map[string]bool{"https://s3.ring.example.com/b": true, "https://s3.internal/b": false, "http://s3.ring.example.com/b": false, "https://127.0.0.1:9000/b": false} {
		req, _ := http.NewRequest(http.MethodGet, host, nil)
		u, err := f(req)
		if err != nil || (u != nil) != proxied {
			t.Errorf("%s: proxy %v %v, want proxied=%v", host, u, err, proxied)
		}
	}
	if (Config{}).Func() != nil {
		t.Error("no proxy set, yet a proxy function")
	}
}
