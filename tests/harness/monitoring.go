package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// MonitoringDir is the directory of the chart's alerting rules and Grafana dashboard.
func MonitoringDir() string {
	return filepath.Join(ChartDir(), "files", "monitoring")
}

// DashboardQueries returns every PromQL expression of the chart's Grafana dashboard, in panel
// order.
func DashboardQueries(t TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(MonitoringDir(), "dashboard.json"))
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

var metricName = regexp.MustCompile(`\b(s3csi_[a-z0-9_]+|controller_runtime_[a-z0-9_]+)\b`)

// MonitoringMetrics returns the names of the metrics the chart's alerts and dashboard use, as a
// scrape shows them (histograms by their _bucket series), sorted.
func MonitoringMetrics(t TB) []string {
	t.Helper()
	rules, err := os.ReadFile(filepath.Join(MonitoringDir(), "alerts.yaml"))
	if err != nil {
		t.Fatalf("alerts: %v", err)
	}
	text := string(rules)
	for _, q := range DashboardQueries(t) {
		text += "\n" + q
	}
	names := metricName.FindAllString(text, -1)
	slices.Sort(names)
	return slices.Compact(names)
}
