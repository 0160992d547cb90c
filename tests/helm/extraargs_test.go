package helm

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestExtraArgs: node.extraArgs, controller.extraArgs and controller.reconcilerExtraArgs come
// last in their containers' arguments, after the chart's own flags, so that one given again
// overrides the chart's value (the binaries take the last value of a repeated flag); the
// mixed values file sets one each, and TestFlagsAcceptedByBinaries runs the binaries with them.
func TestExtraArgs(t *testing.T) {
	m := modes[2]
	if m.name != "mixed" {
		t.Fatalf("modes[2] is %s", m.name)
	}
	_, objs := m.render(t)
	node := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node")).Spec.Template.Spec
	ctrl := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller")).Spec.Template.Spec
	rec := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-pod-reconciler")).Spec.Template.Spec
	for _, tc := range []struct {
		container string
		args      []string
		want      string
	}{
		{"s3-plugin", container(t, node, "s3-plugin").Args, "--health-check-interval=5s"},
		{"s3-csi-controller", container(t, ctrl, "s3-csi-controller").Args, "--empty-bucket-budget=20s"},
		{"s3-pod-reconciler", container(t, rec, "s3-pod-reconciler").Args, "--workers=2"},
	} {
		if n := len(tc.args); n == 0 || tc.args[n-1] != tc.want {
			t.Errorf("%s args %v: want %s last", tc.container, tc.args, tc.want)
		}
	}
}
