package reconciler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// metrics are exported through controller-runtime's registry (the manager's /metrics).
type metrics struct {
	reconcileErrors       *prometheus.CounterVec
	mountpointPodsCreated prometheus.Counter
	state                 *stateCollector
}

// newMetrics returns the controller's metrics; the reconcile error series of every request kind
// start at 0, so they are scraped (and alerted on) before the first error.
func newMetrics(reader client.Reader, namespace string) *metrics {
	m := &metrics{
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "s3csi_controller_reconcile_errors_total",
			Help: "Reconciles that returned an error, by kind of request (attachment, workload, mountpointpod).",
		}, []string{"kind"}),
		mountpointPodsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3csi_controller_mountpoint_pods_created_total",
			Help: "Mountpoint Pods created by this controller process.",
		}),
		state: &stateCollector{reader: reader, namespace: namespace},
	}
	for _, kind := range []string{"attachment", "workload", "mountpointpod"} {
		m.reconcileErrors.WithLabelValues(kind)
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.reconcileErrors, m.mountpointPodsCreated, m.state} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

var (
	descAttachments = prometheus.NewDesc("s3csi_controller_attachments", "MountpointS3PodAttachments in the cluster.", nil, nil)
	descWorkloads   = prometheus.NewDesc("s3csi_controller_attached_workloads", "Workload pods recorded in attachments.", nil, nil)
	descMPPods      = prometheus.NewDesc("s3csi_controller_mountpoint_pods", "Mountpoint Pods by phase.", []string{"phase"}, nil)
	descOldest      = prometheus.NewDesc("s3csi_controller_mountpoint_pod_oldest_pending_seconds",
		"Age of the oldest Pending Mountpoint Pod (0 when none): a pod that cannot be placed or started holds its workloads' mounts.", nil, nil)
)

// stateCollector reports counts read from the controller's cache at scrape time.
type stateCollector struct {
	reader    client.Reader
	namespace string
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAttachments
	ch <- descWorkloads
	ch <- descMPPods
	ch <- descOldest
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var atts crdv2.MountpointS3PodAttachmentList
	if err := c.reader.List(ctx, &atts); err == nil {
		workloads := 0
		for _, a := range atts.Items {
			for _, ws := range a.Spec.MountpointS3PodAttachments {
				workloads += len(ws)
			}
		}
		ch <- prometheus.MustNewConstMetric(descAttachments, prometheus.GaugeValue, float64(len(atts.Items)))
		ch <- prometheus.MustNewConstMetric(descWorkloads, prometheus.GaugeValue, float64(workloads))
	}
	var pods corev1.PodList
	if err := c.reader.List(ctx, &pods, client.InNamespace(c.namespace), client.HasLabels{podcontract.MountpointPodLabel}); err == nil {
		byPhase := map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodRunning: 0, corev1.PodSucceeded: 0, corev1.PodFailed: 0}
		oldest := 0.0
		for _, p := range pods.Items {
			phase := p.Status.Phase
			if phase == "" {
				phase = corev1.PodPending
			}
			byPhase[phase]++
			if age := time.Since(p.CreationTimestamp.Time).Seconds(); phase == corev1.PodPending && age > oldest {
				oldest = age
			}
		}
		for phase, n := range byPhase {
			ch <- prometheus.MustNewConstMetric(descMPPods, prometheus.GaugeValue, float64(n), string(phase))
		}
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, oldest)
	}
}
