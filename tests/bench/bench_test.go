// Package bench measures NodePublish latency on real components and prints the figures.
// Nothing here asserts a duration: run `make bench` and read the table.
package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const (
	sequentialRuns = 30
	concurrent     = 50
)

type stats struct{ median, p90, max time.Duration }

func summarize(d []time.Duration) stats {
	s := slices.Clone(d)
	slices.Sort(s)
	return stats{median: s[len(s)/2], p90: s[(len(s)*9)/10], max: s[len(s)-1]}
}

func (s stats) String() string {
	return fmt.Sprintf("median %7.1f ms   p90 %7.1f ms   max %7.1f ms", ms(s.median), ms(s.p90), ms(s.max))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func publishReq(target string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "bench-volume",
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": "bench-bucket"},
	}
}

// BenchmarkNodePublishSystemd prints NodePublish latency in systemd mode: one publish at a time,
// 50 concurrent publishes on distinct targets, and the stand-in mount-s3's own mount time
// (started directly, daemonising like under systemd), so the driver's overhead can be read off.
func BenchmarkNodePublishSystemd(b *testing.B) {
	harness.RequireRoot(b)
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "bench-bucket")
	kubelet := harness.NewKubeletDir(b)
	sd := harness.StartSystemd(b, kubelet)
	harness.CleanupMounts(b, kubelet)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, ExtraArgs: []string{"--v=0"}})
	ctx := context.Background()

	for i := 0; i < b.N; i++ {
		// The stand-in alone: exec → mounted (parent exits), then unmount.
		var standin []time.Duration
		dir := filepath.Join(kubelet, "standin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for r := 0; r < sequentialRuns; r++ {
			cmd := standinCmd(b, s3, "--force-path-style", "bench-bucket", dir)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("stand-in: %v %s", err, out)
			}
			standin = append(standin, time.Since(start))
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				b.Fatalf("umount: %v %s", err, out)
			}
		}

		// The stand-in alone, 50 at once on distinct directories: what the machine can do
		// without the driver.
		standinEach := make([]time.Duration, concurrent)
		var swg sync.WaitGroup
		for j := 0; j < concurrent; j++ {
			d := filepath.Join(kubelet, fmt.Sprintf("standin-%d", j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
			swg.Add(1)
			go func() {
				defer swg.Done()
				cmd := standinCmd(b, s3, "--force-path-style", "bench-bucket", d)
				t0 := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Errorf("stand-in: %v %s", err, out)
				}
				standinEach[j] = time.Since(t0)
			}()
		}
		swg.Wait()
		for j := 0; j < concurrent; j++ {
			_ = exec.Command("umount", filepath.Join(kubelet, fmt.Sprintf("standin-%d", j))).Run()
		}

		// One publish at a time.
		var single []time.Duration
		for r := 0; r < sequentialRuns; r++ {
			target := harness.TargetPath(b, kubelet, fmt.Sprintf("seq-%d-%d", i, r), "pv")
			start := time.Now()
			if _, err := drv.Node.NodePublishVolume(ctx, publishReq(target)); err != nil {
				b.Fatalf("publish: %v", err)
			}
			single = append(single, time.Since(start))
			if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target}); err != nil {
				b.Fatalf("unpublish: %v", err)
			}
		}

		// 50 publishes at once on distinct targets.
		targets := make([]string, concurrent)
		for j := range targets {
			targets[j] = harness.TargetPath(b, kubelet, fmt.Sprintf("conc-%d-%d", i, j), "pv")
		}
		each := make([]time.Duration, concurrent)
		var wg sync.WaitGroup
		start := time.Now()
		for j := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if _, err := drv.Node.NodePublishVolume(ctx, publishReq(targets[j])); err != nil {
					b.Errorf("concurrent publish %d: %v", j, err)
				}
				each[j] = time.Since(t0)
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		for _, target := range targets {
			if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target}); err != nil {
				b.Fatalf("unpublish: %v", err)
			}
		}

		floorOne, floorMany := systemdFloor(b, sd.Socket)

		st, one, many, stMany := summarize(standin), summarize(single), summarize(each), summarize(standinEach)
		fmt.Printf("\nNodePublish latency, systemd mode (%d sequential runs, %d concurrent publishes)\n", sequentialRuns, concurrent)
		fmt.Printf("  stand-in mount-s3 alone (exec → mounted):   %s\n", st)
		fmt.Printf("  one NodePublish at a time:                  %s\n", one)
		fmt.Printf("  driver overhead (median publish − median stand-in): %.1f ms\n", ms(one.median-st.median))
		fmt.Printf("  %d concurrent NodePublish, each:            %s\n", concurrent, many)
		fmt.Printf("  %d concurrent NodePublish, wall clock:      %.1f ms (median of each = %.2f× one alone)\n", concurrent, ms(wall), float64(many.median)/float64(one.median))
		fmt.Printf("  %d concurrent stand-in mounts alone, each:  %s\n", concurrent, stMany)
		fmt.Printf("  driver overhead under concurrency (median − median stand-in alone): %.1f ms\n", ms(many.median-stMany.median))
		fmt.Printf("  systemd's own floor, a transient unit of /bin/true, one at a time: %s\n", floorOne)
		fmt.Printf("  systemd's own floor, %d such units at once, each:  %s (median = %.2f× one)\n\n", concurrent, floorMany, float64(floorMany.median)/float64(floorOne.median))
		b.ReportMetric(ms(one.median), "publish-median-ms")
		b.ReportMetric(ms(one.p90), "publish-p90-ms")
		b.ReportMetric(ms(one.median-st.median), "overhead-median-ms")
		b.ReportMetric(ms(many.median), "concurrent50-median-ms")
		b.ReportMetric(ms(many.p90), "concurrent50-p90-ms")
		b.ReportMetric(ms(stMany.median), "standin-concurrent50-median-ms")
		b.ReportMetric(ms(floorMany.median), "systemd-true-concurrent50-median-ms")
	}
}

// standinCmd is the stand-in mount-s3 (or $MOUNT_S3) with args, run directly with the bench S3
// server's endpoint and keys in its environment.
func standinCmd(b *testing.B, s3 *harness.S3Server, args ...string) *exec.Cmd {
	cmd := exec.Command(harness.MountS3(b), args...)
	cmd.Env = []string{"AWS_ENDPOINT_URL=" + s3.Endpoint, "AWS_REGION=" + s3.Region, "AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	return cmd
}

// timeUnit starts a transient oneshot unit running cmds one after the other over conn and
// returns the time until its start job ended; a job that fails is a benchmark error.
func timeUnit(b *testing.B, conn *sdbus.Conn, name string, cmds [][]string) time.Duration {
	props := []sdbus.Property{
		sdbus.PropType("oneshot"),
		systemd.ExecProperty("ExecStart", cmds...),
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	ch := make(chan string, 1)
	t0 := time.Now()
	if _, err := conn.StartTransientUnitContext(context.Background(), name, "fail", props, ch); err != nil {
		b.Errorf("start %s: %v", name, err)
		return 0
	}
	if res := <-ch; res != "done" {
		b.Errorf("unit %s: job %s", name, res)
	}
	return time.Since(t0)
}

// systemdFloor measures what the systemd manager itself costs per transient unit, with no
// driver and no mount-s3: StartTransientUnit of a oneshot /bin/true over the same private
// socket, waiting for its start job, once at a time and concurrent at once (one connection,
// like the driver). It is the floor under the systemd-mode publish figures.
func systemdFloor(b *testing.B, socket string) (one, many stats) {
	b.Helper()
	conn, err := systemd.Connect(socket)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	run := func(name string) time.Duration { return timeUnit(b, conn, name, [][]string{{"/bin/true"}}) }
	var single []time.Duration
	for r := 0; r < sequentialRuns; r++ {
		single = append(single, run(fmt.Sprintf("bench-floor-seq-%d.service", r)))
	}
	each := make([]time.Duration, concurrent)
	var wg sync.WaitGroup
	for j := range each {
		wg.Add(1)
		go func() {
			defer wg.Done()
			each[j] = run(fmt.Sprintf("bench-floor-conc-%d.service", j))
		}()
	}
	wg.Wait()
	return summarize(single), summarize(each)
}
