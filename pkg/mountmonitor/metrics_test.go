package mountmonitor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsStartAtZero: before any check, every mode's health, dead and repair series is
// exported at 0 (an alert on increase() or a dashboard sum needs the series to exist).
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range newMetrics().collectors() {
		reg.MustRegister(c)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s %v = %v before anything happened", f.GetName(), m.GetLabel(), v)
			}
			got[f.GetName()]++
		}
	}
	for name, want := range map[string]int{
		"s3csi_node_mount_health":                 6, // systemd, pod, legacy × live, dead
		"s3csi_node_mount_dead_total":             3,
		"s3csi_node_mount_repairs_total":          6, // × succeeded, failed
		"s3csi_node_mount_dead_detection_seconds": 3,
		"s3csi_node_mount_repair_seconds":         3,
	} {
		if got[name] != want {
			t.Errorf("%s: %d series, want %d", name, got[name], want)
		}
	}
}
