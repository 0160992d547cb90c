package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const (
	benchPods    = 2000
	benchNodes   = 100
	benchPVs     = 200
	controllerID = "scality-csi-controller"
)

// BenchmarkController measures the Pod Reconciler (the real binary, production defaults:
// leader election on, 1 s batch window, 4 workers) against a real kube-apiserver: 2,000 workload
// pods over 100 nodes and 200 PVs (bound claims), created in random order by 16 parallel
// clients (BENCH_CONTROLLER_CLIENTS) as fast as the API server accepts them. It prints the time
// until every workload is recorded in an attachment, the attachments and Mountpoint Pods
// created, the controller's API writes per workload (from the API server's audit log) and the
// controller's peak RSS.
func BenchmarkController(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r := runControllerBench(b, benchPods, benchNodes, benchPVs)
		fmt.Printf("\nPod Reconciler: %d workload pods, %d nodes, %d PVs, %d parallel clients\n", r.pods, r.nodes, r.pvs, benchClients(b))
		fmt.Printf("  pods created in:                          %6.2f s\n", r.podsDone.Seconds())
		fmt.Printf("  every workload attached after:            %6.2f s from the first pod (%.2f s after the last pod exists)\n", r.attached.Seconds(), (r.attached - r.podsDone).Seconds())
		fmt.Printf("  attachments / Mountpoint Pods:            %d / %d (expected %d each), duplicate keys: %d\n", r.attachments, r.mpPods, r.pvs, r.dupKeys)
		fmt.Printf("  controller API writes:                    %d = %.2f per workload (%s)\n", r.writes, float64(r.writes)/float64(r.pods), r.byResource)
		fmt.Printf("  controller peak RSS:                      %.1f MiB\n\n", r.peakRSS)
		fmt.Printf("  reference, Scality 2.2 on this machine: 20.6 s (pods 4.4 s), 1.10 writes per workload, 65 MiB\n\n")
		b.ReportMetric(r.attached.Seconds(), "attached-s")
		b.ReportMetric((r.attached - r.podsDone).Seconds(), "after-last-pod-s")
		b.ReportMetric(float64(r.writes)/float64(r.pods), "writes/workload")
		b.ReportMetric(r.peakRSS, "peak-RSS-MiB")
		b.ReportMetric(float64(r.dupKeys), "duplicates")
	}
}

// BenchmarkScaleController is BenchmarkController at BENCH_CONTROLLER_PODS workload pods (default
// 2000,10000,20000), each over pods/10 nodes and pods/10 PVs, one fresh API server per size,
// printed as one table; also the controller's CPU time over the run.
func BenchmarkScaleController(b *testing.B) {
	sizes := []int{2000, 10000, 20000}
	if s := os.Getenv("BENCH_CONTROLLER_PODS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 10 {
				b.Fatalf("BENCH_CONTROLLER_PODS=%q: want integers of at least 10, separated by commas", s)
			}
			sizes = append(sizes, n)
		}
	}
	for i := 0; i < b.N; i++ {
		var rows []controllerRun
		for _, n := range sizes {
			// A sub-benchmark per size: its API server and controller stop before the next.
			b.Run(strconv.Itoa(n), func(b *testing.B) { rows = append(rows, runControllerBench(b, n, n/10, n/10)) })
		}
		fmt.Printf("\nPod Reconciler at scale (%d parallel clients creating the pods; nodes = PVs = pods/10)\n", benchClients(b))
		fmt.Printf("%8s %12s %22s %16s %11s %13s %14s\n", "pods", "created s", "attached after last s", "writes/workload", "duplicates", "CPU s (ctrl)", "peak RSS MiB")
		for _, r := range rows {
			fmt.Printf("%8d %12.2f %22.2f %16.2f %11d %13.1f %14.1f\n", r.pods, r.podsDone.Seconds(), (r.attached - r.podsDone).Seconds(),
				float64(r.writes)/float64(r.pods), r.dupKeys, r.cpuSeconds, r.peakRSS)
		}
		for _, r := range rows {
			if r.queueNote != "" {
				fmt.Printf("  %d pods: %s\n", r.pods, r.queueNote)
			}
		}
		fmt.Println()
	}
}

// benchClients is how many clients create the workload pods at once: 16 (as fast as the API
// server accepts them, about 850 pods/s on a 2-core machine), or BENCH_CONTROLLER_CLIENTS. Fewer
// clients make a slower burst: the API server and the controller then share the machine with
// less of the load generator's work.
func benchClients(b *testing.B) int {
	s := os.Getenv("BENCH_CONTROLLER_CLIENTS")
	if s == "" {
		return 16
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("BENCH_CONTROLLER_CLIENTS=%q: want a positive integer", s)
	}
	return n
}

// controllerRun is one run of the Pod Reconciler benchmark.
type controllerRun struct {
	pods, nodes, pvs    int
	podsDone, attached  time.Duration
	attachments, mpPods int
	dupKeys, writes     int
	byResource          string
	peakRSS, cpuSeconds float64
	queueNote           string
}

func runControllerBench(b *testing.B, pods, nodes, pvs int) controllerRun {
	// Only the controller's writes are audited (the count below): an audit event for each of
	// the bench's own creations cost the API server, which shares the machine, CPU a cluster's
	// would not spend on the bench. BENCH_CONTROLLER_AUDIT=all audits every write, as the runs
	// before 2026-11-27 did.
	opts := harness.KubeOptions{Audit: true, AuditUsers: []string{controllerID}}
	if os.Getenv("BENCH_CONTROLLER_AUDIT") == "all" {
		opts.AuditUsers = nil
	}
	opts.Profiling = os.Getenv("BENCH_CONTROLLER_APIPROF") != ""
	k := harness.StartAPIServer(b, opts)
	ctx := context.Background()
	c := k.Client
	k.EnsureNamespace(b, "mount-s3")
	k.EnsureNamespace(b, "bench")
	for v := 0; v < pvs; v++ {
		name := fmt.Sprintf("pv-%05d", v)
		benchVolumeOf(b, k, name, "bucket-"+name)
	}
	args := []string{"--v=0"}
	if extra := os.Getenv("BENCH_CONTROLLER_ARGS"); extra != "" {
		args = append(args, strings.Fields(extra)...) // e.g. --batch-window=500ms
	}
	pprofAddr := ""
	if os.Getenv("BENCH_SCALE_PROFILES") != "" {
		pprofAddr = freeAddr(b)
		args = append(args, "--pprof-address="+pprofAddr)
	}
	ctrl := harness.StartController(b, k, harness.ControllerOptions{User: controllerID, LeaderElect: true, ExtraArgs: args})
	waitLeader(b, k)
	cpu0 := cpuTicks(b, ctrl.Pid())

	// A watch on the attachments (not a poll: listing them all every few milliseconds loaded
	// the API server the controller writes to) says when the last workload is recorded.
	var restarts atomic.Int32
	allAttached := watchAttached(b, k, pods, &restarts)
	sample := os.Getenv("BENCH_CONTROLLER_QUEUE") != "" // scraping every 100 ms raises the controller's RSS
	var podsSeen <-chan time.Time
	if sample {
		podsSeen = watchPods(b, k, pods)
	}

	// Pod i uses PV i%pvs on the PV's node; the creation order is shuffled.
	order := rand.New(rand.NewPCG(1, 2)).Perm(pods)
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < benchClients(b); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				v := i % pvs
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%06d", i), Namespace: "bench"},
					Spec: corev1.PodSpec{
						NodeName:   fmt.Sprintf("node-%05d", v%nodes),
						Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
						Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
							PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: fmt.Sprintf("claim-pv-%05d", v)}}}},
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
	apiProf := profileAPIServer(b, k, fmt.Sprintf("apiserver-%d", pods))
	r := controllerRun{pods: pods, nodes: nodes, pvs: pvs, podsDone: time.Since(start)}
	defer func() {
		if n := restarts.Load(); n > 0 {
			fmt.Printf("  (%d pods: the API server closed the bench's watch of the attachments %d time(s); each time a list recounted, so \"attached after\" is an upper bound)\n", pods, n)
		}
	}()

	// Where the time after the last pod goes: the controller's work queue (depth, and adds still
	// coming in: workload events the controller's watch delivers late) from the last pod on.
	queue := func() (depth, adds float64) {
		text, err := harness.Scrape(ctrl.MetricsURL)
		if err != nil {
			return -1, -1
		}
		depth, _ = harness.MetricSum(text, "workqueue_depth", `name="mountpoint-s3-pod-attachments"`)
		adds, _ = harness.MetricSum(text, "workqueue_adds_total", `name="mountpoint-s3-pod-attachments"`)
		return depth, adds
	}
	if !sample {
		queue = func() (float64, float64) { return 0, 0 }
	}
	depth0, adds0 := queue()
	var lastAdd time.Duration
	seen := time.Duration(-1) // not measured until the bench's pod watch reports
	prevAdds := adds0
	deadline := time.After(10 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case at := <-allAttached:
			r.attached = at.Sub(start)
			done = true
		case at := <-podsSeen:
			seen = at.Sub(start) - r.podsDone
		case <-tick.C:
			if _, adds := queue(); adds > prevAdds {
				prevAdds, lastAdd = adds, time.Since(start)-r.podsDone
			}
		case <-deadline:
			b.Fatalf("not every one of the %d workloads was attached after 10 minutes", pods)
		}
	}
	_, adds1 := queue()
	if sample {
		own := "did not see them all before every workload was attached"
		if seen >= 0 {
			own = fmt.Sprintf("had the last of them %.2f s after it", seen.Seconds())
		}
		r.queueNote = fmt.Sprintf("at the last pod the queue held %.0f keys; %.0f adds came after it, the last seen %.2f s after it; the bench's own watch of the pods %s", depth0, adds1-adds0, lastAdd.Seconds(), own)
	}
	apiProf()
	time.Sleep(2 * time.Second) // let trailing writes land before counting them
	_, r.attachments, r.dupKeys = countAttached(b, c)
	var mpPods corev1.PodList
	must(b, c.List(ctx, &mpPods, client.InNamespace("mount-s3")))
	r.mpPods = len(mpPods.Items)
	r.peakRSS = float64(vmHWM(b, ctrl.Pid())) / 1024
	r.cpuSeconds = float64(cpuTicks(b, ctrl.Pid())-cpu0) / 100
	r.writes, r.byResource = controllerWrites(b, k.AuditLog)
	if pprofAddr != "" {
		saveProfiles(b, pprofAddr, fmt.Sprintf("controller-%d", pods))
	}
	return r
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

// watchAttached watches the attachments from now on and sends, once, the time at which the
// event recording the pods-th workload arrived. A watch the API server closes (it drops a
// watcher that falls behind a burst of events) is made again after a list, which recounts;
// the time is then that of the list (later than the event it missed), and restarts counts how
// often that happened.
func watchAttached(b *testing.B, k *harness.Kube, pods int, restarts *atomic.Int32) <-chan time.Time {
	wc, err := client.NewWithWatch(k.Config, client.Options{Scheme: k.Scheme})
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	w, err := wc.Watch(ctx, &crdv2.MountpointS3PodAttachmentList{})
	must(b, err)
	out := make(chan time.Time, 1)
	count := func(a *crdv2.MountpointS3PodAttachment) int {
		n := 0
		for _, ws := range a.Spec.MountpointS3PodAttachments {
			n += len(ws)
		}
		return n
	}
	go func() {
		workloads := map[string]int{} // by attachment
		total := 0
		for {
			for ev := range w.ResultChan() {
				a, ok := ev.Object.(*crdv2.MountpointS3PodAttachment)
				if !ok {
					continue
				}
				n := 0
				if ev.Type != watch.Deleted {
					n = count(a)
				}
				total += n - workloads[a.Name]
				workloads[a.Name] = n
				if total >= pods {
					out <- time.Now()
					w.Stop()
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			restarts.Add(1)
			var list crdv2.MountpointS3PodAttachmentList
			if err := wc.List(ctx, &list); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			workloads, total = map[string]int{}, 0
			for i := range list.Items {
				n := count(&list.Items[i])
				workloads[list.Items[i].Name] = n
				total += n
			}
			if total >= pods {
				out <- time.Now()
				return
			}
			if w, err = wc.Watch(ctx, &crdv2.MountpointS3PodAttachmentList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}}); err != nil {
				time.Sleep(100 * time.Millisecond)
				w = watch.NewEmptyWatch()
			}
		}
	}()
	return out
}

// watchPods watches the workload pods from now on (a watch of the bench's own, beside the
// controller's) and sends, once, the time at which the event of the pods-th one arrived: how
// late the API server delivers them to any watcher, not only to the controller. Nothing is sent
// when the watch ends first.
func watchPods(b *testing.B, k *harness.Kube, pods int) <-chan time.Time {
	wc, err := client.NewWithWatch(k.Config, client.Options{Scheme: k.Scheme})
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace("bench"))
	must(b, err)
	out := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		n := 0
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				if n++; n == pods {
					out <- time.Now()
					return
				}
			}
		}
		fmt.Printf("  (%d pods: the API server closed the bench's watch of the pods after %d of them)\n", pods, n)
	}()
	return out
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

// profileAPIServer, with BENCH_SCALE_PROFILES and BENCH_CONTROLLER_APIPROF set, takes a 1 s CPU
// profile of kube-apiserver from now (the last pod created: the controller's writes after the
// burst) into $BENCH_SCALE_PROFILES/<name>.cpu; the function it returns waits for it.
func profileAPIServer(b *testing.B, k *harness.Kube, name string) func() {
	dir := os.Getenv("BENCH_SCALE_PROFILES")
	if dir == "" || os.Getenv("BENCH_CONTROLLER_APIPROF") == "" {
		return func() {}
	}
	hc, err := rest.HTTPClientFor(k.Config)
	must(b, err)
	wait := fetchLater(hc, strings.TrimSuffix(k.Config.Host, "/")+"/debug/pprof/profile?seconds=1", filepath.Join(dir, name+".cpu"))
	return func() {
		if err := wait(); err != nil {
			b.Errorf("kube-apiserver profile: %v", err)
		}
	}
}
