package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// idleWindow is how long the node plugin is left alone at each size.
const idleWindow = 10 * time.Second

// BenchmarkIdleSystemd prints the node plugin's own cost while nothing happens, in systemd mode
// with the mount monitor on (its default 2 s sweep), at growing numbers of live mounts: CPU
// (% of one core over idleWindow, from /proc/<pid>/stat), RSS, and the publish and unpublish
// latency of one more volume. The first size where CPU is not near 0 shows a loop that runs
// while nothing changes.
func BenchmarkIdleSystemd(b *testing.B) {
	harness.RequireRoot(b)
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "bench-bucket")
	kubelet := harness.NewKubeletDir(b)
	sd := harness.StartSystemd(b, kubelet)
	harness.CleanupMounts(b, kubelet)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, ExtraArgs: []string{"--v=0"}})
	ctx := context.Background()
	sizes := []int{1, 10, 50}
	if s := os.Getenv("BENCH_IDLE_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("BENCH_IDLE_SIZES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for i := 0; i < b.N; i++ {
		fmt.Printf("\nnode plugin idle cost, systemd mode, monitor on (%s idle at each size)\n", idleWindow)
		fmt.Printf("%12s %14s %10s %14s %14s\n", "live mounts", "CPU (% core)", "RSS MiB", "publish 1 ms", "unpublish 1 ms")
		live := 0
		for _, n := range sizes {
			for ; live < n; live++ {
				target := filepath.Join(kubelet, "pods", fmt.Sprintf("idle-%04d", live), "mount")
				if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
					b.Fatal(err)
				}
				if _, err := drv.Node.NodePublishVolume(ctx, publishReq(target)); err != nil {
					b.Fatalf("publish %d: %v", live, err)
				}
			}
			time.Sleep(2 * time.Second) // let the burst's signals settle
			cpu0 := cpuTicks(b, drv.Pid())
			time.Sleep(idleWindow)
			cpu := float64(cpuTicks(b, drv.Pid())-cpu0) / 100 / idleWindow.Seconds() * 100
			extra := filepath.Join(kubelet, "pods", "idle-extra", "mount")
			if err := os.MkdirAll(filepath.Dir(extra), 0o750); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := drv.Node.NodePublishVolume(ctx, publishReq(extra)); err != nil {
				b.Fatal(err)
			}
			pub := time.Since(start)
			start = time.Now()
			if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: extra}); err != nil {
				b.Fatal(err)
			}
			unpub := time.Since(start)
			fmt.Printf("%12d %14.1f %10.1f %14.1f %14.1f\n", n, cpu, rssMiB(b, drv.Pid()), ms(pub), ms(unpub))
		}
		for j := 0; j < live; j++ {
			target := filepath.Join(kubelet, "pods", fmt.Sprintf("idle-%04d", j), "mount")
			if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target}); err != nil {
				b.Fatalf("unpublish %d: %v", j, err)
			}
		}
	}
}

// cpuTicks returns utime+stime of pid in clock ticks (USER_HZ, 100 on Linux).
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command (which may contain spaces) start after the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// rssMiB returns the resident set of pid in MiB.
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
