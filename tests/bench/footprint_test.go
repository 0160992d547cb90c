package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// Footprint workload: footprintObjects objects of footprintMiB each, read once each (distinct
// objects, so the kernel's page cache never answers for mount-s3).
const (
	footprintObjects = 8
	footprintMiB     = 32
	footprintIdle    = 10 * time.Second
)

// BenchmarkMountS3Footprint prints the memory and CPU of one mount's daemons at idle and under
// a read burst, in systemd mode (the unit's mount-s3) and in pod mode (the Mountpoint Pod's
// processes: scality-csi-mounter and mount-s3), on real parts with the mount-s3 STAND-IN: the
// figures are the stand-in's (a Go program without mount-s3's prefetcher or cache), not real
// mount-s3's. Nothing is asserted.
func BenchmarkMountS3Footprint(b *testing.B) {
	harness.RequireRoot(b)
	for i := 0; i < b.N; i++ {
		fmt.Printf("\nmount-s3 footprint, one mount, the stand-in's figures (not real mount-s3's)\n")
		fmt.Printf("  idle: %v after the mount; burst: %d objects of %d MiB read once each through the mount\n", footprintIdle, footprintObjects, footprintMiB)
		fmt.Printf("  %-8s %-22s %10s %10s %12s %10s %12s\n", "mode", "process", "idle RSS", "idle CPU", "burst MiB/s", "burst CPU", "peak RSS")
		for _, mode := range []string{"systemd", "pod"} {
			var target string
			var procs map[string]int
			if mode == "systemd" {
				target, procs = footprintSystemd(b)
			} else {
				target, procs = footprintPod(b)
			}
			idle := sample(procs)
			time.Sleep(footprintIdle)
			afterIdle := sample(procs)
			start := time.Now()
			for o := range footprintObjects {
				f, err := os.Open(filepath.Join(target, fmt.Sprintf("obj-%d", o)))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, f)
				f.Close()
				if err != nil || n != footprintMiB<<20 {
					b.Fatalf("read obj-%d: %d bytes, %v", o, n, err)
				}
			}
			took := time.Since(start)
			afterBurst := sample(procs)
			for _, name := range slices.Sorted(maps.Keys(procs)) {
				idleCPU := cpuPercent(afterIdle[name].cpu-idle[name].cpu, footprintIdle)
				burstCPU := cpuPercent(afterBurst[name].cpu-afterIdle[name].cpu, took)
				fmt.Printf("  %-8s %-22s %8.1f Mi %9.1f%% %12.1f %9.1f%% %9.1f Mi\n", mode, name, afterIdle[name].rssMiB, idleCPU,
					float64(footprintObjects*footprintMiB)/took.Seconds(), burstCPU, afterBurst[name].hwmMiB)
				b.ReportMetric(afterIdle[name].rssMiB, mode+"-"+name+"-idle-rss-MiB")
				b.ReportMetric(afterBurst[name].hwmMiB, mode+"-"+name+"-peak-rss-MiB")
			}
		}
		fmt.Println()
	}
}

// footprintBucket creates the bucket and its objects.
func footprintBucket(b *testing.B, s3 *harness.S3Server, bucket string) {
	s3.CreateBucket(b, bucket)
	data := make([]byte, footprintMiB<<20)
	for o := range footprintObjects {
		_, _ = rand.Read(data)
		s3.PutObject(b, bucket, fmt.Sprintf("obj-%d", o), bytes.Clone(data))
	}
}

func footprintSystemd(b *testing.B) (string, map[string]int) {
	s3 := harness.StartS3(b)
	footprintBucket(b, s3, "footprint-sd")
	kubelet := harness.NewKubeletDir(b)
	sd := harness.StartSystemd(b, kubelet)
	harness.CleanupMounts(b, kubelet)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, ExtraArgs: []string{"--v=0"}})
	target := harness.TargetPath(b, kubelet, "pod-f", "pv-f")
	req := publishReq(target)
	req.VolumeContext["bucketName"] = "footprint-sd"
	if _, err := drv.Node.NodePublishVolume(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = drv.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target})
	})
	out, _ := sd.Systemctl("show", "--property=MainPID", "--value", systemd.MountUnitName(target))
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	if pid == 0 {
		b.Fatal("no mount-s3 unit")
	}
	return target, map[string]int{"mount-s3": pid}
}

func footprintPod(b *testing.B) (string, map[string]int) {
	ctx := context.Background()
	k := harness.StartAPIServer(b, harness.KubeOptions{})
	k.EnsureNamespace(b, "mount-s3")
	k.EnsureNamespace(b, "bench")
	s3 := harness.StartS3(b)
	footprintBucket(b, s3, "footprint-pod")
	kubelet := harness.NewKubeletDir(b)
	harness.CleanupMounts(b, kubelet)
	const node = "bench-node"
	harness.StartController(b, k, harness.ControllerOptions{ExtraArgs: []string{"--v=0"}})
	harness.StartMountpointKubelet(b, k, node, kubelet, "mount-s3")
	k.BindRBAC(b, "node-rbac.yaml", "system:node:"+node)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, S3: s3, WithCredentials: true, NodeID: node,
		ExtraArgs: []string{"--default-mounter=pod", "--kubeconfig=" + k.Kubeconfig(b, "system:node:"+node), "--v=0"}})
	pv := benchVolumeOf(b, k, "pv-footprint", "footprint-pod")
	w := benchWorkload(b, k, pv, node, "f")
	waitAttachedAndRunning(b, k, node, pv.Name, 1)
	target := harness.TargetPath(b, kubelet, string(w.UID), pv.Name)
	req := podPublishReq(b, kubelet, pv, w)
	req.VolumeContext["bucketName"] = "footprint-pod"
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		b.Fatalf("publish: %v\n%s", err, drv.Log())
	}
	b.Cleanup(func() {
		_, _ = drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
	})
	pids := harness.MountS3PIDs("footprint-pod")
	if len(pids) != 1 {
		b.Fatalf("mount-s3 processes %v, want one", pids)
	}
	return target, map[string]int{"mount-s3": pids[0], "scality-csi-mounter": parentOf(b, pids[0])}
}

// usage is a process's resource use at one moment.
type usage struct {
	cpu            time.Duration // user + system
	rssMiB, hwmMiB float64       // resident now, and at its peak
}

// sample reads each process's usage from /proc.
func sample(procs map[string]int) map[string]usage {
	out := map[string]usage{}
	for name, pid := range procs {
		var u usage
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
			ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
			st, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
			u.cpu = time.Duration(ut+st) * time.Second / 100
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				k, v, _ := strings.Cut(line, ":")
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				switch k {
				case "VmRSS":
					u.rssMiB = kb / 1024
				case "VmHWM":
					u.hwmMiB = kb / 1024
				}
			}
		}
		out[name] = u
	}
	return out
}

// parentOf returns the parent process of pid.
func parentOf(b *testing.B, pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func cpuPercent(used, over time.Duration) float64 { return 100 * used.Seconds() / over.Seconds() }
