package helm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

var monitoringOn = []string{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
	"--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.podMonitor.labels.release=prometheus",
	"--set", "node.metrics.enabled=true", "--set", "controller.metrics.enabled=true"}

// TestMonitoringRender: nothing of monitoring.coreos.com by default; when enabled, each
// PodMonitor selects the pods of its workload object and scrapes ports those pods name
// ("metrics"; the controller Deployment's also "prov-metrics"; the Pod Reconciler's
// only with pod mode in use), the PrometheusRule holds exactly the
// groups of files/monitoring/alerts.yaml, and the dashboard ConfigMap exactly dashboard.json.
func TestMonitoringRender(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if out, _ := m.render(t); strings.Contains(out, "monitoring.coreos.com") || strings.Contains(out, "s3-csi-driver-dashboard") {
				t.Error("monitoring objects rendered by default")
			}
			_, objs := m.render(t, monitoringOn...)
			monitors := map[string]*unstructured.Unstructured{}
			for _, o := range objs {
				if o.GetKind() == "PodMonitor" {
					monitors[o.GetName()] = o
				}
			}
			want := []string{"s3-csi-node", "s3-csi-controller"}
			if m.pod {
				want = append(want, "s3-pod-reconciler")
			}
			if len(monitors) != len(want) {
				t.Fatalf("PodMonitors %v, want %v", keys(monitors), want)
			}
			for _, name := range want {
				pm := monitors[name]
				if pm == nil {
					t.Fatalf("no PodMonitor %s", name)
				}
				var spec corev1.PodTemplateSpec
				if name == "s3-csi-node" {
					spec = typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", name)).Spec.Template
				} else {
					spec = typed[appsv1.Deployment](t, one(t, objs, "Deployment", name)).Spec.Template
				}
				sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
				for k, v := range sel {
					if spec.Labels[k] != v {
						t.Errorf("PodMonitor %s selects %s=%s; the pods have %q", name, k, v, spec.Labels[k])
					}
				}
				eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
				var ports []string
				for _, ep := range eps {
					port, _ := ep.(map[string]any)["port"].(string)
					ports = append(ports, port)
					found := false
					for _, c := range spec.Spec.Containers {
						for _, p := range c.Ports {
							found = found || p.Name == port
						}
					}
					if !found {
						t.Errorf("PodMonitor %s scrapes port %q, which no container of its pods names", name, port)
					}
				}
				wantPorts := []string{"metrics"}
				if name == "s3-csi-controller" {
					wantPorts = append(wantPorts, "prov-metrics")
				}
				if d := cmp.Diff(wantPorts, ports); d != "" {
					t.Errorf("PodMonitor %s ports (-want +got):\n%s", name, d)
				}
				if pm.GetLabels()["release"] != "prometheus" {
					t.Errorf("PodMonitor %s lacks the extra label", name)
				}
			}
			rule := one(t, objs, "PrometheusRule", "s3-csi-driver")
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			var file struct {
				Groups []any `json:"groups"`
			}
			b, err := os.ReadFile(filepath.Join(harness.MonitoringDir(), "alerts.yaml"))
			harness.Must(t, err)
			harness.Must(t, yaml.Unmarshal(b, &file))
			if diff := cmp.Diff(file.Groups, groups); diff != "" {
				t.Errorf("PrometheusRule groups differ from alerts.yaml (-file +rendered):\n%s", diff)
			}
			cm := typed[corev1.ConfigMap](t, one(t, objs, "ConfigMap", "s3-csi-driver-dashboard"))
			dash, err := os.ReadFile(filepath.Join(harness.MonitoringDir(), "dashboard.json"))
			harness.Must(t, err)
			if cm.Data["s3-csi-driver.json"] != strings.TrimRight(string(dash), "\n") || cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap: labels %v, data differs from dashboard.json: %v", cm.Labels, cm.Data["s3-csi-driver.json"] != strings.TrimRight(string(dash), "\n"))
			}
		})
	}
	if _, err := harness.HelmTemplate(t, release, namespace, "--set", "monitoring.podMonitor.enabled=true", "--set", "node.metrics.enabled=false"); err == nil ||
		!strings.Contains(err.Error(), "monitoring.podMonitor.enabled needs node.metrics.enabled") {
		t.Errorf("a PodMonitor without node metrics: %v; want a refusal", err)
	}
}

// TestDashboardQueries: every query of the Grafana dashboard is PromQL that Prometheus parses
// (Grafana's $__rate_interval and $node put in as Grafana would), checked by promtool as
// recording rules; and every metric the dashboard and the alerts use is one the driver's code
// defines (the cluster suite checks that a running driver exports each).
func TestDashboardQueries(t *testing.T) {
	queries := harness.DashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("%d dashboard queries: the dashboard did not parse as expected", len(queries))
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries {
		q = strings.NewReplacer("$__rate_interval", "5m", "$node", ".*").Replace(q)
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %q\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	harness.Must(t, os.WriteFile(file, []byte(rules.String()), 0o600))
	if out, err := exec.Command(harness.Bin(t, "promtool"), "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
	var src strings.Builder
	for _, dir := range []string{"pkg", "mounter"} {
		harness.Must(t, filepath.Walk(filepath.Join(harness.RepoRoot(), dir), func(p string, info os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				b, rerr := os.ReadFile(p)
				src.Write(b)
				return rerr
			}
			return err
		}))
	}
	for _, name := range harness.MonitoringMetrics(t) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(name, "controller_runtime_") {
			continue // controller-runtime's own (the Pod Reconciler serves its registry)
		}
		if !strings.Contains(src.String(), `"`+base+`"`) {
			t.Errorf("the dashboard or the alerts use %s, which the driver's code does not define", name)
		}
	}
}

// TestControllerMetricsEndpoints: the controller Deployment serves the CSI controller's metrics
// (--metrics-address) and csi-provisioner's (--http-endpoint, the flag of the pinned v6.x; its
// --metrics-address is deprecated) on the ports its containers name metrics and
// prov-metrics, both from monitoring.controllerMetrics; disabled, neither flag, port nor
// PodMonitor is rendered.
func TestControllerMetricsEndpoints(t *testing.T) {
	m := modes[0]
	_, objs := m.render(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.controllerMetrics.port=9900",
		"--set", "monitoring.controllerMetrics.provisionerPort=9901")
	spec := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller")).Spec.Template.Spec
	for _, tc := range []struct {
		container, flag, port string
		number                int32
	}{
		{"s3-csi-controller", "metrics-address", "metrics", 9900},
		{"csi-provisioner", "http-endpoint", "prov-metrics", 9901},
	} {
		c := container(t, spec, tc.container)
		if v, ok := flagValue(c.Args, tc.flag); !ok || v != fmt.Sprintf(":%d", tc.number) {
			t.Errorf("%s: --%s = %q (set %v), want :%d", tc.container, tc.flag, v, ok, tc.number)
		}
		want := []corev1.ContainerPort{{Name: tc.port, ContainerPort: tc.number}}
		if d := cmp.Diff(want, c.Ports); d != "" {
			t.Errorf("%s ports (-want +got):\n%s", tc.container, d)
		}
	}
	_, objs = m.render(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.controllerMetrics.enabled=false")
	spec = typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller")).Spec.Template.Spec
	for _, c := range spec.Containers {
		for _, flag := range []string{"metrics-address", "http-endpoint"} {
			if _, ok := flagValue(c.Args, flag); ok {
				t.Errorf("disabled: %s still has --%s", c.Name, flag)
			}
		}
		if len(c.Ports) != 0 {
			t.Errorf("disabled: %s still has ports %v", c.Name, c.Ports)
		}
	}
	if pm := find(objs, "PodMonitor", "s3-csi-controller"); len(pm) != 0 {
		t.Error("disabled: PodMonitor s3-csi-controller still rendered")
	}
}
