// Package proxyenv is the driver's one proxy setting: the HTTPS_PROXY, HTTP_PROXY and NO_PROXY
// an operator gives the driver (flags, from Helm values), checked once, handed to mount-s3 in
// both modes as exactly those variables and applied to the controller's own S3 client. Nothing
// is read from the driver's environment: a proxy reaches S3 traffic only when configured here.
package proxyenv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"

	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// Config is the proxy setting; the zero Config is no proxy.
type Config struct {
	// HTTPS is the proxy of https:// endpoints, HTTP of http:// ones (URLs such as
	// http://proxy.example.com:3128); NoProxy lists hosts, domains (.example.com), IPs and
	// CIDRs reached directly, comma-separated.
	HTTPS, HTTP, NoProxy string
}

// ErrInvalid is wrapped by every refusal of Parse.
var ErrInvalid = errors.New("invalid proxy setting")

// Names of the flags (for errors) by field.
const (
	FlagHTTPS   = "--https-proxy"
	FlagHTTP    = "--http-proxy"
	FlagNoProxy = "--no-proxy"
)

// maxLen bounds each value (they become environment variables and unit properties).
const maxLen = 2048

// Parse checks c: each proxy is an http or https URL with a host, an optional port and nothing
// else (no credentials: they would be visible in unit properties and process environments; no
// path, query or fragment); NoProxy is a list of plain entries, returned with the spaces around
// them removed (mount-s3 and Go read the list the same way then). Errors name the flag.
func Parse(c Config) (Config, error) {
	for _, f := range []struct{ flag, v string }{{FlagHTTPS, c.HTTPS}, {FlagHTTP, c.HTTP}} {
		if f.v == "" {
			continue
		}
		if len(f.v) > maxLen || safetext.CheckRunes(f.v) != nil {
			return c, fmt.Errorf("%w: %s: not printable text of at most %d bytes", ErrInvalid, f.flag, maxLen)
		}
		u, err := url.Parse(f.v)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "":
			return c, fmt.Errorf("%w: %s: %q is not a proxy URL; use http://host:port or https://host:port", ErrInvalid, f.flag, f.v)
		case u.User != nil:
			return c, fmt.Errorf("%w: %s: credentials in the proxy URL are not supported (they would show in unit properties and process environments); use a proxy that authorises the nodes by address", ErrInvalid, f.flag)
		case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
			return c, fmt.Errorf("%w: %s: %q has a path, query or fragment; use http://host:port", ErrInvalid, f.flag, f.v)
		}
	}
	if c.NoProxy != "" {
		if len(c.NoProxy) > maxLen || safetext.CheckRunes(c.NoProxy) != nil {
			return c, fmt.Errorf("%w: %s: not printable text of at most %d bytes", ErrInvalid, FlagNoProxy, maxLen)
		}
		entries := strings.Split(c.NoProxy, ",")
		for i, e := range entries {
			if e = strings.TrimSpace(e); e == "" || strings.ContainsAny(e, " /?#@") && !isCIDR(e) {
				return c, fmt.Errorf("%w: %s: %q is not a host, domain, IP or CIDR; list them comma-separated, e.g. .cluster.local,10.0.0.0/8", ErrInvalid, FlagNoProxy, e)
			}
			entries[i] = strings.TrimSpace(e)
		}
		c.NoProxy = strings.Join(entries, ",")
	}
	return c, nil
}

func isCIDR(s string) bool {
	_, _, err := net.ParseCIDR(s)
	return err == nil
}

// Set reports whether any proxy is configured.
func (c Config) Set() bool { return c.HTTPS != "" || c.HTTP != "" }

// Env returns the variables mount-s3 gets: each set value under its upper- and lower-case
// name (programs differ in which they read), nothing when no proxy is set.
func (c Config) Env() []string {
	if !c.Set() {
		return nil
	}
	var env []string
	for _, kv := range []struct{ name, v string }{{"HTTPS_PROXY", c.HTTPS}, {"HTTP_PROXY", c.HTTP}, {"NO_PROXY", c.NoProxy}} {
		if kv.v != "" {
			env = append(env, kv.name+"="+kv.v, strings.ToLower(kv.name)+"="+kv.v)
		}
	}
	return env
}

// Names are every variable name Env may set: a unit must not inherit them from its manager
// when the driver does not set them.
var Names = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

// Func returns the proxy selection of an http.Transport for c (nil when no proxy is set): the
// proxy of the request's scheme unless NoProxy matches its host. Loopback hosts and localhost
// are always reached directly.
func (c Config) Func() func(*http.Request) (*url.URL, error) {
	if !c.Set() {
		return nil
	}
	f := (&httpproxy.Config{HTTPSProxy: c.HTTPS, HTTPProxy: c.HTTP, NoProxy: c.NoProxy}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return f(r.URL) }
}
