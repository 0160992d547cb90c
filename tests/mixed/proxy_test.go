package mixed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestProxy: with --http-proxy, mount-s3 reaches S3 through the proxy in both modes. The
// endpoint is an address that leads nowhere except through the proxy (0.0.0.0 on a port
// nothing listens on, which the proxy routes to the S3 server on loopback), so a mount that
// works went through it, and the proxy counts its requests. Without the flag, a proxy in the
// systemd manager's own environment (which units inherit) does not reach mount-s3: the mount
// goes directly to an endpoint it would otherwise have proxied.
func TestProxy(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "proxied")
	c.s3.PutObject(t, "proxied", "hello.txt", []byte("through the proxy"))
	pv := c.volume("proxied", "proxied")
	port, err := harness.FreePort()
	harness.Must(t, err)
	nowhere := fmt.Sprintf("0.0.0.0:%d", port)
	s3Addr := strings.TrimPrefix(c.s3.Endpoint, "http://")
	// The S3 server by an address proxies apply to (0.0.0.0 is not loopback to an HTTP
	// client, yet Linux connects it to this machine): reached directly without a proxy.
	direct := "0.0.0.0:" + s3Addr[strings.LastIndex(s3Addr, ":")+1:]
	proxy := harness.StartProxy(t, map[string]string{nowhere: s3Addr, direct: s3Addr})
	args := []string{"--s3-endpoint-url=http://" + nowhere, "--http-proxy=" + proxy.URL(), "--no-proxy=.cluster.local"}

	for _, mode := range []mountmode.Mode{mountmode.Systemd, mountmode.Pod} {
		n := c.node("px-"+string(mode), nodeOpts{label: string(mode), args: args})
		n.waitEffective(mode)
		before := proxy.Count(nowhere)
		w := n.workload("w-"+string(mode), pv)
		target := n.publish(w, pv)
		if m := n.modeOf(target); m != mode {
			t.Fatalf("mounted in %q mode, want %s", m, mode)
		}
		got, err := os.ReadFile(filepath.Join(target, "hello.txt"))
		if err != nil || string(got) != "through the proxy" {
			t.Errorf("%s mode: read %q %v", mode, got, err)
		}
		harness.Must(t, os.WriteFile(filepath.Join(target, string(mode)+".txt"), []byte(mode), 0o644))
		if b := c.s3.GetObject(t, "proxied", string(mode)+".txt"); string(b) != string(mode) {
			t.Errorf("%s mode: object written through the mount = %q", mode, b)
		}
		if carried := proxy.Count(nowhere) - before; carried < 3 {
			t.Errorf("%s mode: the proxy carried %d requests, want the mount's (list, get, put)", mode, carried)
		}
		n.unpublish(target)
		deletePod(t, w)
	}

	// No proxy flag, a proxy in the manager's environment: units do not inherit it.
	n := c.node("px-leak", nodeOpts{label: "systemd", noPodAccess: true, noKubelet: true, args: []string{"--s3-endpoint-url=http://" + direct}})
	if _, err := n.sd.Systemctl("set-environment", "HTTP_PROXY="+proxy.URL(), "http_proxy="+proxy.URL(), "ALL_PROXY="+proxy.URL()); err != nil {
		t.Fatal(err)
	}
	n.waitEffective(mountmode.Systemd)
	before := proxy.Total()
	w := n.workload("w-leak", pv)
	target := n.publish(w, pv)
	if got, err := os.ReadFile(filepath.Join(target, "hello.txt")); err != nil || string(got) != "through the proxy" {
		t.Errorf("direct mount: read %q %v", got, err)
	}
	if leaked := proxy.Total() - before; leaked != 0 {
		t.Errorf("the manager's proxy variables reached mount-s3: %d requests through the proxy", leaked)
	}
	n.unpublish(target)
	deletePod(t, w)
}
