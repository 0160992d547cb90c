package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
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
