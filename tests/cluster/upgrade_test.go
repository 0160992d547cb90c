package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// both the workload and its Mountpoint Pod: the Mountpoint Pod's eviction is refused (the
// chart's PodDisruptionBudget) while the workload uses it, the writer never sees its mount die
// (every file it reports is in the bucket), and the Mountpoint Pod leaves only after the
// workload, when it has retired; nothing is left. (The drain is done by pod selector, the
// Mountpoint Pods and the workload in two concurrent drains, so that the rig's only node keeps
// the driver's controller, which a real cluster would run on another node.)
func testDrain(t *testing.T) {
	setMode(t, "pod")
	ctx := context.Background()
	ns := newNamespace(t, "drain")
	bucket := "drain-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	w := workloadSpec(ns, "w", claim, podOpts{command: writerScript("w")})
	w.Labels["drain"] = "workload"
	harness.Must(t, env.c.Create(ctx, w))
	waitRunning(t, 2*time.Minute, w)
	time.Sleep(2 * time.Second)
	st := currentState(t)
	if len(st.mpPods) != 1 {
		t.Fatalf("want one Mountpoint Pod: %s", st)
	}
	mp := st.mpPods[0]
	t.Cleanup(func() { _, _ = kubectl(t, "uncordon", rig.NodeName) })

	// The writer's log, streamed until it ends (the pod is gone after its eviction).
	logCtx, stopLog := context.WithTimeout(ctx, 4*time.Minute)
	defer stopLog()
	logs := make(chan string, 1)
	go func() {
		out, _ := kubectlCmd(logCtx, "-n", ns, "logs", "-f", w.Name).CombinedOutput()
		logs <- string(out)
	}()
	// When the workload and the Mountpoint Pod end.
	var mu sync.Mutex
	var workloadGone, mpEnded time.Time
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			now := time.Now()
			var p corev1.Pod
			err := env.c.Get(watchCtx, client.ObjectKeyFromObject(w), &p)
			mu.Lock()
			if workloadGone.IsZero() && apierrors.IsNotFound(err) {
				workloadGone = now
			}
			mu.Unlock()
			err = env.c.Get(watchCtx, client.ObjectKey{Namespace: mpNamespace, Name: mp}, &p)
			mu.Lock()
			if mpEnded.IsZero() && (apierrors.IsNotFound(err) || err == nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)) {
				mpEnded = now
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()

	drain := func(selector string) chan error {
		done := make(chan error, 1)
		go func() {
			out, err := kubectlCmd(ctx, "drain", rig.NodeName, "--pod-selector="+selector, "--ignore-daemonsets", "--delete-emptydir-data",
				"--force", "--grace-period=10", "--timeout=3m").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v\n%s", err, out)
			}
			done <- err
		}()
		return done
	}
	mpDrain := drain("app.kubernetes.io/component=mountpoint")
	time.Sleep(5 * time.Second)
	var p corev1.Pod
	harness.Must(t, env.c.Get(ctx, client.ObjectKey{Namespace: mpNamespace, Name: mp}, &p))
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("the Mountpoint Pod was evicted while its workload runs (phase %s, deleting %v)", p.Status.Phase, p.DeletionTimestamp != nil)
	}
	wlDrain := drain("drain=workload")
	for what, ch := range map[string]chan error{"workload drain": wlDrain, "Mountpoint Pod drain": mpDrain} {
		if err := <-ch; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	stopWatch()
	mu.Lock()
	if workloadGone.IsZero() || mpEnded.IsZero() || mpEnded.Before(workloadGone) {
		t.Errorf("the Mountpoint Pod ended at %v, the workload left at %v: the Mountpoint Pod must outlive it", mpEnded, workloadGone)
	}
	mu.Unlock()
	out := <-logs
	if strings.Contains(out, "failed") || !strings.Contains(out, "wrote=") {
		t.Errorf("writer log: %s", out)
	} else {
		i := strings.LastIndex(out, "wrote=")
		n, err := strconv.Atoi(strings.TrimSpace(out[i+len("wrote="):]))
		harness.Must(t, err)
		checkWriter(t, bucket, "w", n)
		t.Logf("the writer wrote %d files through the drain", n)
	}
	mustRun(t)(kubectl(t, "uncordon", rig.NodeName))
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
	const previous, current = "scality-s3-csi-driver-0.0.9", "scality-s3-csi-driver-0.1.0"
	if got := chartOf(); got != previous {
		t.Fatalf("release runs chart %s, want the previous release %s", got, previous)
	}
	original := driverPods()
	installChartFrom(t, harness.ChartDir(), "--set-string", "node.podAnnotations.upgrade-test=1", "--set-string", "controller.podAnnotations.upgrade-test=1")
	if got := chartOf(); got != current {
		t.Errorf("after the upgrade the release runs chart %s, want %s", got, current)
	}
	upgraded := driverPods()
	if !replaced(original, upgraded) {
		t.Errorf("the upgrade did not replace every driver pod: %v → %v", original, upgraded)
	}
	time.Sleep(3 * time.Second)
	mustRun(t)(helm(t, "rollback", release, "-n", releaseNS, "--wait"))
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
	setMode(t, "systemd")
}
