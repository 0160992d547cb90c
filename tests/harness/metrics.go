package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultNodeID is the node name a driver started without DriverOptions.NodeID reports (and
// labels its metrics with).
const DefaultNodeID = "node-1"

// FreeLoopbackAddr returns a loopback host:port nothing listens on (for a --metrics-address).
func FreeLoopbackAddr(t TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ScrapeSum scrapes http://addr/metrics and returns MetricSum of name with labels; a failed
// scrape fails t.
func ScrapeSum(t TB, addr, name string, labels ...string) float64 {
	t.Helper()
	text, err := Scrape("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	sum, _ := MetricSum(text, name, labels...)
	return sum
}

// Scrape returns the Prometheus text exposition served at url (one try, 10 s at most).
func Scrape(url string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), err
}

// MetricSum returns the sum of the samples of metric name in the text exposition text whose
// labels include every pair in labels (each written `key="value"`, as in the exposition), and
// how many samples matched. Other labels (node, …) may be present.
func MetricSum(text, name string, labels ...string) (float64, int) {
	sum, n := 0.0, 0
	for _, line := range strings.Split(text, "\n") {
		var set string
		switch {
		case strings.HasPrefix(line, name+"{"):
			end := strings.Index(line, "}")
			if end < 0 {
				continue
			}
			set, line = line[len(name)+1:end], line[end+1:]
		case strings.HasPrefix(line, name+" "):
			line = line[len(name):]
		default:
			continue
		}
		have := map[string]bool{}
		for _, pair := range strings.Split(set, ",") {
			have[pair] = true
		}
		ok := true
		for _, l := range labels {
			ok = ok && have[l]
		}
		f := strings.Fields(line)
		if !ok || len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
			n++
		}
	}
	return sum, n
}
