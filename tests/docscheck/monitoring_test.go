package main

import (
	"slices"
	"testing"
)

// TestMonitoringDrift runs the monitoring check on a small repository: an undocumented metric,
// a documented one the code lacks, an unlisted alert and a runbook_url without its heading are
// reported; a histogram's _count series and a documented alert with its runbook are not.
func TestMonitoringDrift(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) { writeFile(t, root, rel, content) }
	write("pkg/a/a.go", "package a\n\nvar names = []string{\"s3csi_a_total\", \"s3csi_b_seconds\", \"s3csi_undocumented\", \"not_ours_total\"}\n")
	write("pkg/a/a_test.go", "package a\n\nvar testOnly = \"s3csi_test_only\"\n")
	write("docs/monitoring.md", "| `s3csi_a_total{mode}` | x |\n| `s3csi_b_seconds` | see s3csi_b_seconds_count |\n| `s3csi_gone_total` | drift |\n\n`AlertGood`, `AlertBadRunbook`\n")
	write("docs/troubleshooting.md", "# Troubleshooting\n\n## Alerts\n\n### AlertGood\n\n### Alert unlisted (no. 1)\n")
	write("charts/scality-s3-csi-driver/files/monitoring/alerts.yaml", `groups:
  - name: g
    rules:
      - record: s3csi:a:rate
        expr: rate(s3csi_a_total[5m])
      - alert: AlertGood
        expr: vector(1)
        annotations: {runbook_url: "`+runbookBase+`alertgood"}
      - alert: AlertBadRunbook
        expr: vector(1)
        annotations: {runbook_url: "`+runbookBase+`nowhere"}
      - alert: AlertUnlisted
        expr: vector(1)
        annotations: {runbook_url: "`+runbookBase+`alert-unlisted-no-1"}
`)
	got, err := monitoringDrift(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docs/monitoring.md: metric s3csi_undocumented (registered in the code) is not listed",
		"docs/monitoring.md: s3csi_gone_total is not a metric the code registers",
		`alerts.yaml: alert AlertBadRunbook: runbook_url "` + runbookBase + `nowhere" is not ` + runbookBase + `<a heading of docs/troubleshooting.md>`,
		"docs/monitoring.md: alert AlertUnlisted (alerts.yaml) is not listed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("drift =\n%q\nwant\n%q", got, want)
	}
}
