package helm

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestImagesList: `make images-list VALUES=<file>` prints exactly the images the chart's pods
// run (every container and init container of every workload object, both modes, the sidecar
// registration) plus the Mountpoint Pods' image, for an air-gapped mirror.
func TestImagesList(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cmd := exec.Command("make", "-s", "--no-print-directory", "-C", harness.RepoRoot(), "images-list", "VALUES="+filepath.Join(harness.RepoRoot(), "tests", "helm", m.valuesFile()))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("make images-list: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			_, objs := m.render(t, "--set", "mounter.modesInUse={systemd,pod}", "--set", "node.registration=sidecars")
			var want []string
			add := func(spec corev1.PodSpec) {
				for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
					want = append(want, c.Image)
					if v, ok := flagValue(c.Args, "mountpoint-image"); ok {
						want = append(want, v)
					}
				}
			}
			for _, o := range objs {
				switch o.GetKind() {
				case "DaemonSet":
					add(typed[appsv1.DaemonSet](t, o).Spec.Template.Spec)
				case "Deployment":
					add(typed[appsv1.Deployment](t, o).Spec.Template.Spec)
				case "Pod", "Job", "StatefulSet", "CronJob", "ReplicaSet":
					t.Errorf("%s %s: images-list does not know this kind", o.GetKind(), o.GetName())
				}
			}
			slices.Sort(want)
			want = slices.Compact(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("make images-list (-rendered +printed):\n%s", diff)
			}
		})
	}
}
