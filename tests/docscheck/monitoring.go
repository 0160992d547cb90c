package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// runbookBase is where every alert's runbook_url points: a section of the troubleshooting guide.
const runbookBase = "https://github.com/s3csi/s3-csi-driver/blob/main/docs/troubleshooting.md#"

var (
	// metricName is a metric name of the driver's own, as the code registers it.
	metricName = regexp.MustCompile(`^s3csi_[a-z0-9_]+$`)
	// docMetric is an s3csi_ name in the monitoring page (a histogram's _bucket, _sum and _count
	// series are its name's).
	docMetric = regexp.MustCompile(`\bs3csi_[a-z0-9_]+`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile("[^a-z0-9 _-]")
)

// monitoringDrift lists where docs/monitoring.md and the alert runbooks drift from the code:
// a metric the Go sources of cmd, pkg and mounter register (a string literal s3csi_…) or an
// alert of the chart's alerts.yaml that the page does not name; an s3csi_ name of the page
// that the code does not register; an alert whose runbook_url is not a heading of
// docs/troubleshooting.md.
func monitoringDrift(root string) ([]string, error) {
	registered, err := registeredMetrics(root)
	if err != nil {
		return nil, err
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "monitoring.md")) //nolint:gosec // G304: the repository's own page
	if err != nil {
		return nil, err
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md")) //nolint:gosec // G304: as above
	if err != nil {
		return nil, err
	}
	alerts, err := alertRules(filepath.Join(root, "charts", "scality-s3-csi-driver", "files", "monitoring", "alerts.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range registered {
		if !strings.Contains(string(page), "`"+m+"`") && !strings.Contains(string(page), "`"+m+"{") {
			out = append(out, fmt.Sprintf("docs/monitoring.md: metric %s (registered in the code) is not listed", m))
		}
	}
	known := map[string]bool{}
	for _, m := range registered {
		known[m] = true
	}
	for _, m := range docMetric.FindAllString(string(page), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if !known[m] && !known[base] && !strings.HasSuffix(m, "_") { // s3csi_controller_*: a prefix
			out = append(out, fmt.Sprintf("docs/monitoring.md: %s is not a metric the code registers", m))
		}
	}
	anchors := map[string]bool{}
	for _, h := range heading.FindAllStringSubmatch(string(guide), -1) {
		anchors[slug(h[1])] = true
	}
	for _, a := range alerts {
		if !strings.Contains(string(page), "`"+a.Alert+"`") {
			out = append(out, fmt.Sprintf("docs/monitoring.md: alert %s (alerts.yaml) is not listed", a.Alert))
		}
		anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbookBase)
		if !ok || !anchors[anchor] {
			out = append(out, fmt.Sprintf("alerts.yaml: alert %s: runbook_url %q is not %s<a heading of docs/troubleshooting.md>", a.Alert, a.Annotations["runbook_url"], runbookBase))
		}
	}
	return out, nil
}

// slug is GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as -.
func slug(h string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// alertRule is what the check reads of one alerting rule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Annotations map[string]string `json:"annotations"`
}

// alertRules returns the alerting rules of a Prometheus rule file.
func alertRules(path string) ([]alertRule, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the chart's own rule file
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// registeredMetrics returns the s3csi_ metric names the driver's non-test Go sources hold as
// string literals (the Name of their CounterOpts, GaugeOpts and HistogramOpts, and of NewDesc),
// sorted.
func registeredMetrics(root string) ([]string, error) {
	seen := map[string]bool{}
	if err := eachStringLiteral(root, []string{"cmd", "pkg", "mounter"}, func(s string) {
		if metricName.MatchString(s) {
			seen[s] = true
		}
	}); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out, nil
}
