package cluster

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// kubectlCmd is kubectl against the rig as an *exec.Cmd (for commands that run alongside the
// test, such as a drain or a log stream).
func kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(env.bin, "k8s", "kubectl"), append([]string{"--kubeconfig=" + rig.Kubeconfig()}, args...)...)
}

// testDrain drains the node with a writer on a pod-mode volume, as kubectl drain would evict
// both the workload and its Mountpoint Pod (drainWriters): the Mountpoint Pod's eviction is
// refused while the workload uses it, the writer never sees its mount die, and nothing is left.
func testDrain(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "drain")
	bucket := "drain-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	w := workloadSpec(ns, "w", claim, podOpts{command: writerScript("w")})
	w.Labels["drain"] = "workload"
	harness.Must(t, env.c.Create(context.Background(), w))
	waitRunning(t, 2*time.Minute, w)
	time.Sleep(2 * time.Second)
	st := currentState(t)
	if len(st.mpPods) != 1 {
		t.Fatalf("want one Mountpoint Pod: %s", st)
	}
	drainWriters(t, bucket, []*corev1.Pod{w}, st.mpPods[0], mountpointPodsSelector)
	expectClean(t)
}

// testUpgradeRollback runs the previous release of the chart (previousChart), upgrades it to
// this chart while a writer runs in each mode (one mounted in systemd mode, one through a
// Mountpoint Pod), then rolls it back: every driver pod is replaced twice, the writers never
// fail a write, every file they report is in the bucket, each mount keeps its mode, the
// Mountpoint Pod keeps serving its workload through both rollouts and retires when it leaves.
// (The rig has one image of the driver: the upgrade also changes both pod templates, as a new
// image tag does; version skew of the binaries themselves is not exercised.) At the end the
// release is this chart again.
func testUpgradeRollback(t *testing.T) {
	installChartFrom(t, previousChart())
	t.Cleanup(func() { installChart(t) })
	setMode(t, "systemd")
	ns := newNamespace(t, "upgrade")
	bucket := "upgrade-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	ws := workload(t, ns, "ws", claim, podOpts{command: writerScript("ws")})
	waitRunning(t, 2*time.Minute, ws)
	setMode(t, "pod")
	wp := workload(t, ns, "wp", claim, podOpts{command: writerScript("wp")})
	waitRunning(t, 2*time.Minute, wp)
	time.Sleep(2 * time.Second)
	before := currentState(t)
	if len(before.units) != 1 || len(before.mpPods) != 1 {
		t.Fatalf("want one systemd mount and one Mountpoint Pod: %s", before)
	}
	// chartOf returns the chart (name-version) of the release's current revision.
	chartOf := func() string {
		out := mustRun(t)(helm(t, "history", release, "-n", releaseNS, "--max", "1", "-o", "json"))
		var h []struct {
			Chart string `json:"chart"`
		}
		if err := json.Unmarshal([]byte(out), &h); err != nil || len(h) != 1 {
			t.Fatalf("helm history: %v: %s", err, out)
		}
		return h[0].Chart
	}
	// The driver's pods (node plugin, controller, Pod Reconciler) by UID: each rollout must
	// replace them all.
	driverPods := func() []string {
		var uids []string
		for _, app := range []string{"s3-csi-node", "s3-csi-controller", "s3-pod-reconciler"} {
			var pods corev1.PodList
			harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(releaseNS), client.MatchingLabels{"app": app}))
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					uids = append(uids, string(p.UID))
				}
			}
		}
		return uids
	}
	replaced := func(old, now []string) bool {
		for _, u := range now {
			if slices.Contains(old, u) {
				return false
			}
		}
		return len(now) > 0
	}
	const previous, current = "scality-s3-csi-driver-0.0.10", "scality-s3-csi-driver-0.1.0"
	if got := chartOf(); got != previous {
		t.Fatalf("release runs chart %s, want the previous release %s", got, previous)
	}
	original := driverPods()
	// docs/upgrade.md's commands, with the suite's values (and pod annotations: both pod
	// templates change, as a new image tag would change them).
	dir := t.TempDir()
	harness.Must(t, os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(chartValues()+"  podAnnotations: {upgrade-test: \"1\"}\ncontroller:\n  podAnnotations: {upgrade-test: \"1\"}\n"), 0o600))
	runDocSteps(t, "between-releases", dir, "")
	if got := chartOf(); got != current {
		t.Errorf("after the upgrade the release runs chart %s, want %s", got, current)
	}
	upgraded := driverPods()
	if !replaced(original, upgraded) {
		t.Errorf("the upgrade did not replace every driver pod: %v → %v", original, upgraded)
	}
	time.Sleep(3 * time.Second)
	runDocSteps(t, "between-releases-rollback", dir, "")
	waitRollout(t)
	if got := chartOf(); got != previous {
		t.Errorf("after the rollback the release runs chart %s, want %s", got, previous)
	}
	if rolledBack := driverPods(); !replaced(upgraded, rolledBack) {
		t.Errorf("the rollback did not replace every driver pod: %v → %v", upgraded, rolledBack)
	}
	time.Sleep(3 * time.Second)
	after := currentState(t)
	if !slices.Equal(after.units, before.units) || !slices.Equal(after.mpPods, before.mpPods) {
		t.Errorf("mounts changed through the upgrade and the rollback:\nbefore %s\nafter  %s", before, after)
	}
	for _, w := range []*corev1.Pod{ws, wp} {
		var p corev1.Pod
		harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(w), &p))
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("writer %s restarted %d times", w.Name, rc)
		}
	}
	counts := map[string]int{}
	for _, w := range []*corev1.Pod{ws, wp} {
		counts[w.Name] = stopWriter(t, w)
	}
	for name, n := range counts {
		checkWriter(t, bucket, name, n)
	}
	t.Logf("files written through the upgrade and the rollback, checked: %v", counts)
	expectClean(t)
	// OnDelete waves, as docs/upgrade.md drives them: the node plugin of the node replaced
	// by hand, the DaemonSet's counts and revisions read.
	runDocSteps(t, "ondelete", dir, "")
	mustRun(t)(kubectl(t, "-n", releaseNS, "wait", "--for=condition=Ready", "pod", "-l", "app=s3-csi-node", "--timeout=2m"))
	setMode(t, "systemd")
}
