package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// idleWindow is how long the node plugin is left alone at each size.
const idleWindow = 10 * time.Second

// scaleNode is one node plugin under test: it publishes and unpublishes volume i (0-based).
type scaleNode struct {
	drv       *harness.Driver
	diagnose  func() string // what to print when a call fails (the manager's log tail)
	metrics   string        // host:port of the plugin's metrics
	publish   func(ctx context.Context, i int) error
	unpublish func(ctx context.Context, i int) error
	// prepare readies volume i outside the timed part (pod mode: the workload is attached
	// and its Mountpoint Pod Running).
	prepare func(i int)
	// storm, in systemd mode, counts the D-Bus signals systemd sends a private connection
	// within 2 s of one mount and unmount elsewhere on the node.
	storm func() int
	// debug, in systemd mode, turns the manager's debug log (to the kernel log) on or off
	// around the publish and unpublish of one more volume (BENCH_SCALE_SYSTEMD_DEBUG).
	debug func(on bool)
	// floor, in systemd mode, is what systemd itself takes for a transient unit at this size,
	// with no driver and no mount-s3: median start of a unit of /bin/true, of one that makes
	// as many mount changes as a mount unit's start, and of one that unmounts them as an
	// unpublish's unmount unit does (see unitFloor).
	floor func() (plain, mounts, umount time.Duration)
	// standin, in systemd mode, is the median time of the stand-in mount-s3 alone at this size
	// (exec → mounted, no systemd, no driver), as make bench measures it at one mount.
	standin func() time.Duration
}

// BenchmarkScaleNode prints, for each mode, the node plugin's own costs at growing numbers of
// live mounts (BENCH_SCALE_SIZES, default 10,100,500,1000): CPU while nothing happens (% of one
// core over idleWindow, /proc/<pid>/stat), RSS, the mount monitor's mean sweep time over that
// window (s3csi_node_mount_sweep_seconds), and the publish and unpublish latency of one more
// volume (the median over BENCH_SCALE_REPS more volumes, each published and unpublished in
// turn); then RSS once every mount is gone. The mounts are made 10 at a time. Systemd mode: one
// unit (and stand-in mount-s3) per mount. Pod mode: the workloads spread over 10 volumes, so 10
// Mountpoint Pods (the harness runs them as processes) each share their mount with the binds of
// their workloads. Mode systemd-protected (only with BENCH_SCALE_MODES) is systemd mode with
// --mount-s3-protect-system: each unit has a mount namespace of its own, a copy of the node's
// mount table. Every mode also prints the machine's unreclaimable kernel memory (SUnreclaim of
// /proc/meminfo) above what it was before the first mount: the namespaces' cost, which no
// process's RSS shows. Nothing is asserted.
func BenchmarkScaleNode(b *testing.B) {
	harness.RequireRoot(b)
	sizes := []int{10, 100, 500, 1000}
	if s := os.Getenv("BENCH_SCALE_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("BENCH_SCALE_SIZES=%q: want positive integers separated by commas", s)
			}
			sizes = append(sizes, n)
		}
	}
	modes := []string{"systemd", "pod"}
	if m := os.Getenv("BENCH_SCALE_MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	for i := 0; i < b.N; i++ {
		for _, mode := range modes {
			var n *scaleNode
			switch mode {
			case "systemd":
				n = scaleSystemd(b, false)
			case "systemd-protected":
				n = scaleSystemd(b, true)
			case "pod":
				n = scalePod(b)
			default:
				b.Fatalf("BENCH_SCALE_MODES: unknown mode %q (systemd, systemd-protected, pod)", mode)
			}
			runScale(b, mode, n, sizes)
		}
	}
}

func runScale(b *testing.B, mode string, n *scaleNode, sizes []int) {
	ctx := context.Background()
	pid := n.drv.Pid()
	fmt.Printf("\nnode plugin at scale, %s mode (%s idle at each size; mounts made 10 at a time)\n", mode, idleWindow)
	fmt.Printf("%12s %13s %9s %15s %14s %16s %20s %18s %33s %18s %20s %18s\n", "live mounts", "idle CPU %", "RSS MiB", "mean sweep ms", "publish +1 ms", "unpublish +1 ms", "in systemd jobs ms", "signals/mount op", "systemd floor ms (4 mnt, umount)", "stand-in alone ms", "RSS anon / file MiB", "+SUnreclaim MiB")
	unreclaim0 := sunreclaimMiB(b)
	fmt.Printf("%12d %13s %9.1f %15s %14s %16s %20s %18s %24s %18s %20s %18s\n", 0, "-", rssMiB(b, pid), "-", "-", "-", "-", "-", "-", "-", rssSplit(b, pid), "0")
	live := 0
	for _, size := range sizes {
		for live < size {
			batch := min(10, size-live)
			var wg sync.WaitGroup
			errs := make([]error, batch)
			for j := 0; j < batch; j++ {
				n.prepare(live + j)
			}
			for j := 0; j < batch; j++ {
				wg.Add(1)
				go func(j int) {
					defer wg.Done()
					errs[j] = n.publish(ctx, live+j)
				}(j)
			}
			wg.Wait()
			for j, err := range errs {
				if err != nil {
					b.Fatalf("%s: publish %d: %v\n%s", mode, live+j, err, n.diagnose())
				}
			}
			live += batch
		}
		time.Sleep(3 * time.Second) // let the burst settle
		sum0, count0 := sweepTotals(b, n.metrics)
		cpu0 := cpuTicks(b, pid)
		time.Sleep(idleWindow)
		cpu := float64(cpuTicks(b, pid)-cpu0) / 100 / idleWindow.Seconds() * 100
		sum1, count1 := sweepTotals(b, n.metrics)
		sweep := "-"
		if count1 > count0 {
			sweep = fmt.Sprintf("%.1f", (sum1-sum0)/(count1-count0)*1000)
		}
		rss, split, unreclaim := rssMiB(b, pid), rssSplit(b, pid), sunreclaimMiB(b)-unreclaim0
		// reps more volumes, each published and unpublished on its own: the median of each.
		extras := make([]int, scaleReps(b))
		settle := scaleSettle(b)
		for r := range extras {
			extras[r] = 1_000_000 + 100*size + r // a volume of its own, made and removed again
			n.prepare(extras[r])
		}
		jobs0 := systemdJobs(b, n.metrics)
		traced := traceNode(b, n.metrics, fmt.Sprintf("%s-%d", mode, size))
		perfDone := perfAll(b, fmt.Sprintf("%s-%d", mode, size))
		if n.debug != nil {
			n.debug(true)
		}
		var pubs, unpubs []time.Duration
		var jobsPub float64
		for _, extra := range extras {
			time.Sleep(settle)
			j0 := systemdJobs(b, n.metrics)
			start := time.Now()
			if err := n.publish(ctx, extra); err != nil {
				b.Fatalf("%s: publish one more at %d: %v", mode, size, err)
			}
			pubs = append(pubs, time.Since(start))
			jobsPub += systemdJobs(b, n.metrics) - j0
			time.Sleep(settle)
			start = time.Now()
			if err := n.unpublish(ctx, extra); err != nil {
				b.Fatalf("%s: unpublish one more at %d: %v", mode, size, err)
			}
			unpubs = append(unpubs, time.Since(start))
		}
		pub, unpub := summarize(pubs).median, summarize(unpubs).median
		jobs2 := systemdJobs(b, n.metrics)
		reps := float64(len(extras))
		if n.debug != nil {
			n.debug(false)
		}
		traced()
		perfDone()
		storm := "-"
		if n.storm != nil {
			storm = strconv.Itoa(n.storm())
		}
		floor := "-"
		if n.floor != nil {
			plain, mounts, umount := n.floor()
			floor = fmt.Sprintf("%.0f (%.0f, %.0f)", ms(plain), ms(mounts), ms(umount))
		}
		standin := "-"
		if n.standin != nil {
			standin = fmt.Sprintf("%.0f", ms(n.standin()))
		}
		fmt.Printf("%12d %13.1f %9.1f %15s %14.1f %16.1f %20s %18s %24s %18s %20s %18.1f\n", size, cpu, rss, sweep, ms(pub), ms(unpub),
			fmt.Sprintf("%.0f / %.0f", jobsPub/reps*1000, (jobs2-jobs0-jobsPub)/reps*1000), storm, floor, standin, split, unreclaim)
		saveProfiles(b, n.metrics, fmt.Sprintf("%s-%d", mode, size))
	}
	for j := 0; j < live; j += 10 {
		var wg sync.WaitGroup
		for k := j; k < min(j+10, live); k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				if err := n.unpublish(ctx, k); err != nil {
					b.Errorf("%s: unpublish %d: %v", mode, k, err)
				}
			}(k)
		}
		wg.Wait()
	}
	time.Sleep(idleWindow)
	fmt.Printf("%12s %13s %9.1f   (every mount gone, %s later; anon / file %s; +SUnreclaim %.1f MiB)\n", "0 again", "-", rssMiB(b, pid), idleWindow, rssSplit(b, pid), sunreclaimMiB(b)-unreclaim0)
	saveProfiles(b, n.metrics, mode+"-0-again")
}

// scaleSystemd is a node plugin in systemd mode on a user manager of its own; protected, with
// --mount-s3-protect-system (kubelet directory and binaries outside /tmp: harness.NewProtectedNode).
func scaleSystemd(b *testing.B, protected bool) *scaleNode {
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "bench-bucket")
	args := []string{"--v=0"}
	var kubelet string
	if protected {
		node := harness.NewProtectedNode(b)
		kubelet, args = node.KubeletDir, append(args, node.Args...)
	} else {
		kubelet = harness.NewKubeletDir(b)
	}
	sd := harness.StartSystemd(b, kubelet)
	debugLog := os.Getenv("BENCH_SCALE_SYSTEMD_DEBUG") != ""
	harness.CleanupMounts(b, kubelet)
	addr := freeAddr(b)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true,
		ExtraArgs: append(append(args, "--metrics-address="+addr, "--profiling"), nodeArgs()...)})
	target := func(i int) string { return filepath.Join(kubelet, "pods", fmt.Sprintf("scale-%05d", i), "mount") }
	return &scaleNode{
		drv: drv, metrics: addr, storm: func() int { return signalStorm(b, sd.Socket, kubelet) },
		floor: func() (time.Duration, time.Duration, time.Duration) { return unitFloor(b, sd.Socket, kubelet) },
		debug: func(on bool) {
			if !debugLog {
				return
			}
			// The manager's standard error is /dev/null: the kernel log (dmesg) has its lines,
			// with times.
			level := map[bool]string{true: "debug", false: "info"}[on]
			for _, args := range [][]string{{"log-target", "kmsg"}, {"log-level", level}} {
				if out, err := sd.Systemctl(args...); err != nil {
					b.Fatalf("systemctl %v: %v: %s", args, err, out)
				}
			}
		},
		standin:  func() time.Duration { return standinAlone(b, s3, kubelet) },
		diagnose: func() string { l := sd.Log(); return l[max(0, len(l)-3000):] },
		prepare: func(i int) {
			if err := os.MkdirAll(filepath.Dir(target(i)), 0o750); err != nil {
				b.Fatal(err)
			}
		},
		publish: func(ctx context.Context, i int) error {
			_, err := drv.Node.NodePublishVolume(ctx, publishReq(target(i)))
			return err
		},
		unpublish: func(ctx context.Context, i int) error {
			_, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target(i)})
			return err
		},
	}
}

// scalePodVolumes is how many volumes (so Mountpoint Pods) pod mode's workloads spread over.
const scalePodVolumes = 10

func scalePod(b *testing.B) *scaleNode {
	k := harness.StartAPIServer(b, harness.KubeOptions{})
	k.EnsureNamespace(b, "mount-s3")
	k.EnsureNamespace(b, "bench")
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "pod-bench")
	kubelet := harness.NewKubeletDir(b)
	harness.CleanupMounts(b, kubelet)
	const node = "bench-node"
	harness.StartController(b, k, harness.ControllerOptions{ExtraArgs: []string{"--v=0"}})
	harness.StartMountpointKubelet(b, k, node, kubelet, "mount-s3")
	k.BindRBAC(b, "node-rbac.yaml", "system:node:"+node)
	addr := freeAddr(b)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, S3: s3, WithCredentials: true, NodeID: node,
		ExtraArgs: append([]string{"--default-mounter=pod", "--kubeconfig=" + k.Kubeconfig(b, "system:node:"+node), "--v=0", "--metrics-address=" + addr, "--profiling"}, nodeArgs()...)})
	pvs := make([]*corev1.PersistentVolume, scalePodVolumes)
	for v := range pvs {
		pvs[v] = benchVolume(b, k, fmt.Sprintf("pv-scale-%02d", v))
	}
	var pods sync.Map // volume index → its workload pod
	req := func(i int) *csi.NodePublishVolumeRequest {
		pv := pvs[i%scalePodVolumes]
		v, _ := pods.Load(i)
		return podPublishReq(b, kubelet, pv, v.(*corev1.Pod))
	}
	return &scaleNode{
		drv: drv, metrics: addr,
		diagnose: func() string { l := drv.Log(); return l[max(0, len(l)-3000):] },
		prepare: func(i int) {
			pods.Store(i, benchWorkload(b, k, pvs[i%scalePodVolumes], node, fmt.Sprintf("w%07d", i)))
		},
		publish: func(ctx context.Context, i int) error {
			_, err := drv.Node.NodePublishVolume(ctx, req(i))
			return err
		},
		unpublish: func(ctx context.Context, i int) error {
			_, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req(i).VolumeId, TargetPath: req(i).TargetPath})
			return err
		},
	}
}

// scaleReps is how many more volumes are published and unpublished at each size
// (BENCH_SCALE_REPS, default 5): one such figure is noisy on a 2-core machine.
func scaleReps(b *testing.B) int {
	s := os.Getenv("BENCH_SCALE_REPS")
	if s == "" {
		return 5
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("BENCH_SCALE_REPS=%q: want a positive integer", s)
	}
	return n
}

// nodeArgs are the node plugin flags BENCH_SCALE_NODE_ARGS adds (e.g. --health-check-interval=0).
func nodeArgs() []string { return strings.Fields(os.Getenv("BENCH_SCALE_NODE_ARGS")) }

// scaleSettle is the pause before each timed publish and unpublish of one more volume
// (BENCH_SCALE_SETTLE, a Go duration, default 0: back to back, as every table in
// docs/development.md before 2026-11-27). With a pause each operation starts on a quiet node,
// as a lone kubelet call does, and pays what a quiet node costs: on this machine a cgroup
// attach of each process systemd starts waits for an RCU grace period (8-16 ms) unless another
// attach came just before, and systemd's handling of a mount table change is slower.
func scaleSettle(b *testing.B) time.Duration {
	s := os.Getenv("BENCH_SCALE_SETTLE")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		b.Fatalf("BENCH_SCALE_SETTLE=%q: want a Go duration of at least 0 (e.g. 1s)", s)
	}
	return d
}

// sweepTotals reads the sum and count of s3csi_node_mount_sweep_seconds.
func sweepTotals(b *testing.B, addr string) (sum, count float64) {
	text, err := harness.Scrape("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	sum, _ = harness.MetricSum(text, "s3csi_node_mount_sweep_seconds_sum")
	count, _ = harness.MetricSum(text, "s3csi_node_mount_sweep_seconds_count")
	return sum, count
}

// signalStorm counts the D-Bus signals systemd sends a private connection of its own within 2 s
// of one tmpfs mounted and unmounted under dir: systemd announces every mount unit it sees
// changed, and a path with two different mounts stacked (the tmpfs guard of releases before
// ADR 0008 under mount-s3's bind) reads as changed at every reading of the mount table.
func signalStorm(b *testing.B, socket, dir string) int {
	conn, err := dbus.Dial("unix:path=" + socket)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		b.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 1<<16)
	conn.Signal(ch)
	time.Sleep(500 * time.Millisecond) // what was under way before
	for len(ch) > 0 {
		<-ch
	}
	probe, err := os.MkdirTemp(dir, "storm-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(probe)
	if err := syscall.Mount("storm", probe, "tmpfs", 0, "size=4k"); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Unmount(probe, 0); err != nil {
		b.Fatal(err)
	}
	n := 0
	for end := time.After(2 * time.Second); ; {
		select {
		case <-ch:
			n++
			continue
		case <-end:
		}
		return n
	}
}

// unitFloor returns the median start time (5 runs each) of three transient oneshot units over
// systemd's private socket, with no driver and no mount-s3: one of /bin/true; one making the
// four mount changes of a mount unit's start below dir (mount-s3's mount, making it private,
// two binds) with a tmpfs instead of mount-s3; and one unmounting those three mounts in one
// `umount`, as an unpublish's unmount unit does. systemd reads the whole mount table after each
// change, so the last two grow with the node's mounts whoever makes them: the floors under a
// systemd-mode publish and unpublish at this size.
func unitFloor(b *testing.B, socket, dir string) (plain, mounts, umount time.Duration) {
	conn, err := systemd.Connect(socket)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	m, err := os.MkdirTemp(dir, "floor-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(m)
	src, dst := filepath.Join(m, "src"), filepath.Join(m, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string, cmds [][]string) time.Duration {
		d := timeUnit(b, conn, name, cmds)
		if b.Failed() {
			b.FailNow()
		}
		return d
	}
	var p, w, u []time.Duration
	for i := range 5 {
		p = append(p, run(fmt.Sprintf("bench-floor-true-%d.service", i), [][]string{{"/bin/true"}}))
		w = append(w, run(fmt.Sprintf("bench-floor-mounts-%d.service", i), [][]string{
			{"/bin/mount", "-t", "tmpfs", "-o", "size=4k", "floor", src},
			{"/bin/mount", "--make-private", src},
			{"/bin/mount", "--bind", src, dst},
			{"/bin/mount", "--bind", src, dst},
		}))
		u = append(u, run(fmt.Sprintf("bench-floor-umount-%d.service", i), [][]string{{"/bin/umount", "--", dst, dst, src}}))
		for _, d := range []string{dst, src} {
			if mounted, known := (mounttable.Table{}).Mounted(d); !known || mounted {
				b.Fatalf("%s still mounted after the floor's umount unit (or the kernel cannot tell: %v)", d, !known)
			}
		}
	}
	return summarize(p).median, summarize(w).median, summarize(u).median
}

// standinAlone returns the median (5 runs) of the stand-in mount-s3 mounting the bench's bucket
// at a directory below dir, run directly (exec until its parent exits, the mount ready), then
// unmounted untimed.
func standinAlone(b *testing.B, s3 *harness.S3Server, dir string) time.Duration {
	d, err := os.MkdirTemp(dir, "standin-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(d)
	var runs []time.Duration
	for range 5 {
		cmd := standinCmd(b, s3, "--force-path-style", "bench-bucket", d)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stand-in: %v %s", err, out)
		}
		runs = append(runs, time.Since(t0))
		if err := syscall.Unmount(d, 0); err != nil {
			b.Fatalf("unmount %s: %v", d, err)
		}
	}
	return summarize(runs).median
}

// systemdJobs returns the seconds the node plugin has waited for systemd's jobs so far
// (s3csi_node_systemd_job_seconds; 0 in pod mode): the part of a publish or unpublish spent in
// systemd, which re-reads the whole mount table at each mount change.
func systemdJobs(b *testing.B, addr string) float64 {
	text, err := harness.Scrape("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	sum, _ := harness.MetricSum(text, "s3csi_node_systemd_job_seconds_sum")
	return sum
}

// cpuTicks returns utime+stime of pid in clock ticks (USER_HZ, 100 on Linux).
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// rssMiB returns the resident set of pid in MiB.
// sunreclaimMiB is the machine's unreclaimable slab memory (SUnreclaim of /proc/meminfo), in MiB.
func sunreclaimMiB(b *testing.B) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "SUnreclaim:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.Fatalf("/proc/meminfo: %q: %v", line, err)
			}
			return kb / 1024
		}
	}
	b.Fatal("/proc/meminfo has no SUnreclaim line")
	return 0
}

func rssMiB(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// rssSplit returns the anonymous and file-backed parts of pid's resident set ("anon / file",
// MiB): the heap, stacks and runtime against the binary's pages.
func rssSplit(b *testing.B, pid int) string {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	var anon, file float64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb / 1024
		case "RssFile:", "RssShmem:":
			file += kb / 1024
		}
	}
	return fmt.Sprintf("%.1f / %.1f", anon, file)
}

// traceNode starts a 2 s execution trace of the node plugin, saved to
// $BENCH_SCALE_PROFILES/<name>.trace when BENCH_SCALE_TRACE is set too (read it with go tool
// trace); the function it returns waits for the trace.
func traceNode(b *testing.B, metrics, name string) func() {
	dir := os.Getenv("BENCH_SCALE_PROFILES")
	if dir == "" || os.Getenv("BENCH_SCALE_TRACE") == "" {
		return func() {}
	}
	wait := fetchLater(http.DefaultClient, "http://"+metrics+"/debug/pprof/trace?seconds=2", filepath.Join(dir, name+".trace"))
	time.Sleep(100 * time.Millisecond) // the trace has started
	return func() {
		if err := wait(); err != nil {
			b.Fatalf("trace: %v", err)
		}
	}
}

// perfAll, with BENCH_SCALE_PROFILES and BENCH_SCALE_PERF set, samples every CPU of the machine
// (kernel and user stacks, perf record -a -g) from now until the function it returns is called,
// into $BENCH_SCALE_PROFILES/<name>.perf.data: where the publish and unpublish of one more volume
// spend CPU outside the node plugin (systemd, the kernel's mount code). Read it with perf report
// -i <file> --sort comm,dso,sym.
func perfAll(b *testing.B, name string) func() {
	dir := os.Getenv("BENCH_SCALE_PROFILES")
	if dir == "" || os.Getenv("BENCH_SCALE_PERF") == "" {
		return func() {}
	}
	cmd := exec.Command("perf", "record", "-a", "-g", "-q", "-o", filepath.Join(dir, name+".perf.data"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf record (BENCH_SCALE_PERF needs perf): %v", err)
	}
	time.Sleep(500 * time.Millisecond) // perf has opened its events
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "interrupt") {
			b.Logf("perf record: %v", err) // perf reports the SIGINT that ends it as its status
		}
	}
}

// saveProfiles writes the node plugin's heap profile, its goroutines and the runtime's memory
// statistics, and with BENCH_SCALE_CPU set a 5 s CPU profile (idle), to
// $BENCH_SCALE_PROFILES/<name>.{heap,goroutines,memstats,cpu} when that variable names a
// directory; read them with go tool pprof.
func saveProfiles(b *testing.B, metrics, name string) {
	dir := os.Getenv("BENCH_SCALE_PROFILES")
	if dir == "" {
		return
	}
	profiles := []struct{ path, ext string }{{"heap?gc=1", "heap"}, {"goroutine", "goroutines"}, {"heap?debug=1", "memstats"}}
	if os.Getenv("BENCH_SCALE_CPU") != "" {
		// The CPU profiler keeps about 8 MiB of buffers: the RSS of later rows grows by it.
		profiles = append(profiles, struct{ path, ext string }{"profile?seconds=5", "cpu"})
	}
	for _, p := range profiles {
		if err := fetchTo(http.DefaultClient, "http://"+metrics+"/debug/pprof/"+p.path, filepath.Join(dir, name+"."+p.ext)); err != nil {
			b.Fatalf("profile %s: %v", p.path, err)
		}
	}
}

// fetchTo saves the body of a GET of url, which must answer 200, to path.
func fetchTo(hc *http.Client, url, path string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return os.WriteFile(path, body, 0o600)
}

// fetchLater runs fetchTo in the background (a profile or trace that takes seconds to answer);
// the function it returns waits for it.
func fetchLater(hc *http.Client, url, path string) func() error {
	done := make(chan error, 1)
	go func() { done <- fetchTo(hc, url, path) }()
	return func() error { return <-done }
}
