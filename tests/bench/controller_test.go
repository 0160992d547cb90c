package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const (
	benchPods    = 2000
	benchNodes   = 100
	benchPVs     = 200
	benchClients = 16
	controllerID = "scality-csi-controller"
)

// BenchmarkController measures the Pod Reconciler (the real binary, production defaults:
// leader election on, 1 s batch window, 4 workers) against a real kube-apiserver: 2,000 workload
// pods over 100 nodes and 200 PVs (bound claims), created in random order by 16 parallel
// clients as fast as the API server accepts them. It prints the time until every workload is
// recorded in an attachment, the attachments and Mountpoint Pods created, the controller's API
// writes per workload (from the API server's audit log) and the controller's peak RSS.
func BenchmarkController(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runControllerBench(b)
	}
}

func runControllerBench(b *testing.B) {
	k := harness.StartAPIServer(b, harness.KubeOptions{Audit: true})
	ctx := context.Background()
	c := k.Client
	k.EnsureNamespace(b, "mount-s3")
	k.EnsureNamespace(b, "bench")
	for v := 0; v < benchPVs; v++ {
		name := fmt.Sprintf("pv-%03d", v)
		benchVolumeOf(b, k, name, "bucket-"+name)
	}
	ctrl := harness.StartController(b, k, harness.ControllerOptions{User: controllerID, LeaderElect: true, ExtraArgs: []string{"--v=0"}})
	waitLeader(b, k)

	// Pod i uses PV i%200 on the PV's node; the creation order is shuffled.
	order := rand.New(rand.NewPCG(1, 2)).Perm(benchPods)
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < benchClients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				v := i % benchPVs
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%04d", i), Namespace: "bench"},
					Spec: corev1.PodSpec{
						NodeName:   fmt.Sprintf("node-%03d", v%benchNodes),
						Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
						Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
							PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: fmt.Sprintf("claim-pv-%03d", v)}}}},
					},
				}
				if err := c.Create(ctx, pod); err != nil {
					b.Errorf("create pod: %v", err)
				}
			}
		}()
	}
	for _, i := range order {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	podsDone := time.Since(start)

	var attached time.Duration
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, _, _ := countAttached(b, c)
		if n >= benchPods {
			attached = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d workloads attached after 3 minutes", n, benchPods)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let trailing writes land before counting them
	_, atts, dupKeys := countAttached(b, c)
	var mpPods corev1.PodList
	must(b, c.List(ctx, &mpPods, client.InNamespace("mount-s3")))
	peakRSS := vmHWM(b, ctrl.Pid())
	writes, byResource := controllerWrites(b, k.AuditLog)

	fmt.Printf("\nPod Reconciler: %d workload pods, %d nodes, %d PVs, %d parallel clients\n", benchPods, benchNodes, benchPVs, benchClients)
	fmt.Printf("  pods created in:                          %6.2f s\n", podsDone.Seconds())
	fmt.Printf("  every workload attached after:            %6.2f s from the first pod (%.2f s after the last pod exists)\n", attached.Seconds(), (attached - podsDone).Seconds())
	fmt.Printf("  attachments / Mountpoint Pods:            %d / %d (expected %d each), duplicate keys: %d\n", atts, len(mpPods.Items), benchPVs, dupKeys)
	fmt.Printf("  controller API writes:                    %d = %.2f per workload (%s)\n", writes, float64(writes)/benchPods, byResource)
	fmt.Printf("  controller peak RSS:                      %.1f MiB\n\n", float64(peakRSS)/1024)
	fmt.Printf("  reference, Scality 2.2 on this machine: 20.6 s (pods 4.4 s), 1.10 writes per workload, 65 MiB\n\n")
	b.ReportMetric(attached.Seconds(), "attached-s")
	b.ReportMetric((attached - podsDone).Seconds(), "after-last-pod-s")
	b.ReportMetric(float64(writes)/benchPods, "writes/workload")
	b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(dupKeys), "duplicates")
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// countAttached returns the workloads recorded, the attachments, and the keys with more than one
// attachment.
func countAttached(b *testing.B, c client.Client) (int, int, int) {
	var list crdv2.MountpointS3PodAttachmentList
	if err := c.List(context.Background(), &list); err != nil {
		b.Fatal(err)
	}
	n := 0
	keys := map[string]int{}
	for _, a := range list.Items {
		keys[a.Spec.NodeName+"/"+a.Spec.PersistentVolumeName]++
		for _, ws := range a.Spec.MountpointS3PodAttachments {
			n += len(ws)
		}
	}
	dups := 0
	for _, v := range keys {
		if v > 1 {
			dups++
		}
	}
	return n, len(list.Items), dups
}

func waitLeader(b *testing.B, k *harness.Kube) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var leases coordinationv1.LeaseList
		if err := k.Client.List(context.Background(), &leases, client.InNamespace("default")); err == nil && len(leases.Items) > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("controller did not become leader")
}

// vmHWM returns a process's peak resident set size in KiB.
func vmHWM(b *testing.B, pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// controllerWrites counts the write requests the controller's user made, from the audit log.
func controllerWrites(b *testing.B, path string) (int, string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	by := map[string]int{}
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb      string                                 `json:"verb"`
			User      struct{ Username string }              `json:"user"`
			ObjectRef struct{ Resource, Subresource string } `json:"objectRef"`
			Stage     string                                 `json:"stage"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != controllerID || ev.Stage != "ResponseComplete" {
			continue
		}
		total++
		by[ev.Verb+" "+ev.ObjectRef.Resource]++
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return total, strings.Join(parts, ", ")
}
