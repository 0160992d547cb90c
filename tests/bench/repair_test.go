package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// repairKills is how many times each mode's mount-s3 is killed.
const repairKills = 20

// BenchmarkMountRepair prints how fast the node plugin notices a killed mount-s3 (detection:
// from the kill to its s3csi_node_mount_dead_total counting it) and mounts it again (repair:
// from the detection to the target answering again), in systemd mode and in pod mode, over
// repairKills kills each, with no call from kubelet. Nothing is asserted.
func BenchmarkMountRepair(b *testing.B) {
	harness.RequireRoot(b)
	for i := 0; i < b.N; i++ {
		sd := repairSystemd(b)
		pd := repairPod(b)
		fmt.Printf("\nDead mount detection and repair by the node plugin, %d kills of mount-s3 each\n", repairKills)
		for _, r := range []struct {
			mode string
			m    repairRuns
		}{{"systemd", sd}, {"pod", pd}} {
			fmt.Printf("  %-8s detection: %s\n", r.mode, summarize(r.m.detect))
			fmt.Printf("  %-8s repair:    %s\n", "", summarize(r.m.repair))
			b.ReportMetric(ms(summarize(r.m.detect).median), r.mode+"-detect-median-ms")
			b.ReportMetric(ms(summarize(r.m.repair).median), r.mode+"-repair-median-ms")
		}
		fmt.Println()
	}
}

type repairRuns struct{ detect, repair []time.Duration }

// measureKills kills the daemon pid() returns repairKills times and times detection and repair.
func measureKills(b *testing.B, metricsAddr, mode, target string, pid func() int) repairRuns {
	var r repairRuns
	for k := 0; k < repairKills; k++ {
		// One full check round between kills, so the monitor has seen the repaired mount live
		// (a kill before that would be the same death to it).
		time.Sleep(2500 * time.Millisecond)
		before := deadTotal(b, metricsAddr, mode)
		p := pid()
		if p == 0 {
			b.Fatal("no mount-s3 to kill")
		}
		killed := time.Now()
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		var detected time.Time
		deadline := time.Now().Add(time.Minute)
		for detected.IsZero() {
			if time.Now().After(deadline) {
				b.Fatalf("kill %d not detected within a minute", k)
			}
			if deadTotal(b, metricsAddr, mode) > before {
				detected = time.Now()
			} else {
				time.Sleep(2 * time.Millisecond)
			}
		}
		for {
			if time.Now().After(deadline) {
				b.Fatalf("kill %d not repaired within a minute", k)
			}
			if np := pid(); np != 0 && np != p && harness.StatfsWithin(target, time.Second) == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		r.detect = append(r.detect, detected.Sub(killed))
		r.repair = append(r.repair, time.Since(detected))
	}
	return r
}

func repairSystemd(b *testing.B) repairRuns {
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "repair-bench")
	kubelet := harness.NewKubeletDir(b)
	sd := harness.StartSystemd(b, kubelet)
	harness.CleanupMounts(b, kubelet)
	addr := freeAddr(b)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true,
		ExtraArgs: []string{"--v=0", "--metrics-address=" + addr}})
	target := harness.TargetPath(b, kubelet, "pod-r", "pv-r")
	req := publishReq(target)
	req.VolumeContext["bucketName"] = "repair-bench"
	if _, err := drv.Node.NodePublishVolume(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	runs := measureKills(b, addr, "systemd", target, func() int {
		out, _ := sd.Systemctl("show", "--property=MainPID", "--value", systemd.MountUnitName(target))
		pid, _ := strconv.Atoi(strings.TrimSpace(out))
		return pid
	})
	if _, err := drv.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target}); err != nil {
		b.Fatal(err)
	}
	return runs
}

func repairPod(b *testing.B) repairRuns {
	ctx := context.Background()
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
		ExtraArgs: []string{"--default-mounter=pod", "--kubeconfig=" + k.Kubeconfig(b, "system:node:"+node), "--v=0", "--metrics-address=" + addr}})
	pv := benchVolume(b, k, "pv-repair")
	w := benchWorkload(b, k, pv, node, "r")
	waitAttachedAndRunning(b, k, node, pv.Name, 1)
	target := harness.TargetPath(b, kubelet, string(w.UID), pv.Name)
	req := podPublishReq(b, kubelet, pv, w)
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		b.Fatalf("publish: %v\n%s", err, drv.Log())
	}
	runs := measureKills(b, addr, "pod", target, func() int {
		if pids := harness.MountS3PIDs("pod-bench"); len(pids) > 0 {
			return pids[0]
		}
		return 0
	})
	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		b.Fatal(err)
	}
	return runs
}

// deadTotal reads s3csi_node_mount_dead_total{mode} from the driver's metrics.
func deadTotal(b *testing.B, addr, mode string) float64 {
	text, err := harness.Scrape("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	v, _ := harness.MetricSum(text, "s3csi_node_mount_dead_total", `mode="`+mode+`"`)
	return v
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
