package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testMonitoring scrapes the running node plugin (port metrics, 9809), the Pod Reconciler
// (8080) and the CSI controller (9810) as a PodMonitor would, and checks that every metric the
// chart's alerts and Grafana dashboard use is exported, the node plugin's labelled with the node. A pod-mode workload
// runs first, so the Pod Reconciler has reconciled whatever steps ran before.
func testMonitoring(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "monitoring")
	bucket := "monitoring-" + suffix()
	env.s3.CreateBucket(t, bucket)
	p := workload(t, ns, "w", staticVolume(t, ns, "data", bucket, volumeOpts{}), podOpts{})
	waitRunning(t, 2*time.Minute, p)
	defer func() { deletePods(t, p); expectClean(t) }()
	scrape := func(app string, port int) string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(releaseNS), client.MatchingLabels{"app": app}))
		var out strings.Builder
		for _, p := range pods.Items {
			if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				continue
			}
			text, err := harness.Scrape(fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, port))
			if err != nil {
				t.Fatalf("scrape %s (%s): %v", p.Name, app, err)
			}
			out.WriteString(text)
		}
		if out.Len() == 0 {
			t.Fatalf("no running %s pod to scrape", app)
		}
		return out.String()
	}
	node, controller := scrape("s3-csi-node", 9809), scrape("s3-pod-reconciler", 8080)
	csiController := scrape("s3-csi-controller", 9810)
	for _, name := range harness.MonitoringMetrics(t) {
		_, inNode := harness.MetricSum(node, name)
		_, inController := harness.MetricSum(controller, name)
		_, inCSIController := harness.MetricSum(csiController, name)
		switch {
		case inNode == 0 && inController == 0 && inCSIController == 0:
			t.Errorf("%s: used by the alerts or the dashboard, exported by none of the node plugin, the Pod Reconciler and the CSI controller", name)
		case inNode > 0:
			if _, labelled := harness.MetricSum(node, name, `node="`+rig.NodeName+`"`); labelled != inNode {
				t.Errorf("%s: %d of %d node plugin samples lack node=%q", name, inNode-labelled, inNode, rig.NodeName)
			}
		}
	}
}
