package mountmonitor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
)

// metrics are the monitor's Prometheus metrics.
type metrics struct {
	mounts    *prometheus.GaugeVec
	dead      *prometheus.CounterVec
	detection *prometheus.HistogramVec
	repairs   *prometheus.CounterVec
	repairDur *prometheus.HistogramVec
	sweep     prometheus.Histogram
	oom       *prometheus.CounterVec
}

// newMetrics returns the monitor's metrics, every series of the known modes, states and results
// already there at 0 (histograms with empty buckets): a scrape shows them from the start, so rates and alerts
// (docs/monitoring) need no special case for a series that has not happened yet.
func newMetrics() *metrics {
	m := build()
	for _, mode := range []mountmode.Mode{mountmode.Systemd, mountmode.Pod, mountmode.Legacy} {
		for _, state := range []string{"live", "dead"} {
			m.mounts.WithLabelValues(string(mode), state)
		}
		m.dead.WithLabelValues(string(mode))
		m.detection.WithLabelValues(string(mode))
		m.repairDur.WithLabelValues(string(mode))
		m.oom.WithLabelValues(string(mode))
		for _, result := range []string{"succeeded", "failed"} {
			m.repairs.WithLabelValues(string(mode), result)
		}
	}
	return m
}

func build() *metrics {
	buckets := []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}
	return &metrics{
		mounts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "s3csi_node_mount_health",
			Help: "Published S3 mounts on this node by the mode that made them and their state at the last check (live or dead)."}, []string{"mode", "state"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s3csi_node_mount_dead_total",
			Help: "Mounts found dead or gone (mount-s3 killed, stopped or not answering) by the node plugin's own checks."}, []string{"mode"}),
		detection: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "s3csi_node_mount_dead_detection_seconds",
			Help: "Time between the last check that found a mount live and the one that found it dead: an upper bound of how long a death went unnoticed.", Buckets: buckets}, []string{"mode"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s3csi_node_mount_repairs_total",
			Help: "Repairs of dead mounts attempted by the node plugin, by result (succeeded or failed)."}, []string{"mode", "result"}),
		repairDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "s3csi_node_mount_repair_seconds",
			Help: "Duration of the node plugin's repairs of dead mounts.", Buckets: buckets}, []string{"mode"}),
		sweep: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "s3csi_node_mount_sweep_seconds",
			Help:    "Duration of the mount monitor's sweeps (every published target checked once, repairs included).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30}}),
		oom: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s3csi_node_mount_oom_killed_total",
			Help: "Dead mounts whose mount-s3 the kernel's OOM killer ended (a memory limit, or the node's memory), as their mode reports it."}, []string{"mode"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.mounts, m.dead, m.detection, m.repairs, m.repairDur, m.sweep, m.oom}
}

func (m *metrics) setMounts(counts map[mountmode.Mode]map[string]int) {
	for mode, byState := range counts {
		for state, n := range byState {
			m.mounts.WithLabelValues(string(mode), state).Set(float64(n))
		}
	}
}

func (m *metrics) detected(mode mountmode.Mode, lastLive, now time.Time) {
	m.dead.WithLabelValues(string(mode)).Inc()
	if !lastLive.IsZero() {
		m.detection.WithLabelValues(string(mode)).Observe(now.Sub(lastLive).Seconds())
	}
}

func (m *metrics) repaired(mode mountmode.Mode, ok bool, d time.Duration) {
	result := "succeeded"
	if !ok {
		result = "failed"
	}
	m.repairs.WithLabelValues(string(mode), result).Inc()
	if ok {
		m.repairDur.WithLabelValues(string(mode)).Observe(d.Seconds())
	}
}

func (m *metrics) oomKilled(mode mountmode.Mode) {
	m.oom.WithLabelValues(string(mode)).Inc()
}
