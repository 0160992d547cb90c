package harness

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Proxy is a forward HTTP proxy on loopback that counts what it carries: absolute-form requests
// (plain http through a proxy) and CONNECT tunnels (https). It reaches only the hosts its routes
// name, each at the loopback address given, so a client that uses it can be sent to a host
// name or address that leads nowhere without it (and never leaves the machine).
type Proxy struct {
	// Addr is host:port of the proxy (127.0.0.1).
	Addr string

	routes map[string]string
	mu     sync.Mutex
	counts map[string]int
}

// StartProxy starts a proxy forwarding requests for each key of routes (host:port as the
// client names it) to its value (a loopback host:port); any other destination gets 502. It
// stops in t.Cleanup.
func StartProxy(t TB, routes map[string]string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), routes: routes, counts: map[string]int{}}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// URL is the proxy's URL, for HTTP_PROXY and --http-proxy.
func (p *Proxy) URL() string { return "http://" + p.Addr }

// Count returns how many requests (or tunnels) the proxy carried to host (host:port as the
// client names it).
func (p *Proxy) Count(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[host]
}

// Total returns how many requests the proxy received, routed or not.
func (p *Proxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.counts {
		n += c
	}
	return n
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if r.Method != http.MethodConnect {
		host = r.URL.Host
	}
	p.mu.Lock()
	p.counts[host]++
	p.mu.Unlock()
	to, ok := p.routes[host]
	if !ok || !strings.HasPrefix(to, "127.0.0.1:") {
		http.Error(w, "no route to "+host, http.StatusBadGateway)
		return
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, to)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Host = to
	out.Host = r.Host // signed by the client (SigV4): kept as it sent it
	out.Header.Del("Proxy-Connection")
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// tunnel joins the client to to (CONNECT).
func (p *Proxy) tunnel(w http.ResponseWriter, to string) {
	dst, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = dst.Close()
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	src, _, err := hj.Hijack()
	if err != nil {
		_ = dst.Close()
		return
	}
	if _, err := io.WriteString(src, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = src.Close()
		_ = dst.Close()
		return
	}
	go func() { _, _ = io.Copy(dst, src); _ = dst.Close() }()
	go func() { _, _ = io.Copy(src, dst); _ = src.Close() }()
}
