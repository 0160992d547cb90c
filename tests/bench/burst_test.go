package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// retryable are the codes kubelet retries a publish or unpublish on (every failed NodePublish is
// retried; these say "try again", not "this request is wrong").
var retryable = map[codes.Code]bool{codes.Unavailable: true, codes.Aborted: true, codes.DeadlineExceeded: true, codes.ResourceExhausted: true, codes.Internal: true}

// BenchmarkBurstSystemd publishes BENCH_BURST (default 200) volumes at once in systemd mode,
// with --systemd-timeout BENCH_BURST_TIMEOUT (default 30s; set it low to make systemd time out
// under the burst), then unpublishes them all at once, and prints: how many calls succeeded,
// the failures by code, and what was left behind: mounts the driver has no record of (a failed
// publish that mounted after all), and anything at all after the unpublish. Kubelet retries a
// failed publish and unpublishes only what was published, so a failed publish that leaves an
// unrecorded mount is a leak. Nothing is asserted.
func BenchmarkBurstSystemd(b *testing.B) {
	harness.RequireRoot(b)
	n := envInt(b, "BENCH_BURST", 200)
	timeout := os.Getenv("BENCH_BURST_TIMEOUT")
	if timeout == "" {
		timeout = "30s"
	}
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "bench-bucket")
	kubelet := harness.NewKubeletDir(b)
	sd := harness.StartSystemd(b, kubelet)
	harness.CleanupMounts(b, kubelet)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true,
		ExtraArgs: []string{"--v=0", "--systemd-timeout=" + timeout}})
	stateDir := filepath.Join(kubelet, "plugins", "s3.csi.scality.com", "systemd")
	target := func(i int) string { return filepath.Join(kubelet, "pods", fmt.Sprintf("burst-%05d", i), "mount") }
	for i := 0; i < n; i++ {
		if err := os.MkdirAll(filepath.Dir(target(i)), 0o750); err != nil {
			b.Fatal(err)
		}
	}
	for r := 0; r < b.N; r++ {
		fmt.Printf("\nburst of %d publishes then %d unpublishes at once, systemd mode, --systemd-timeout=%s\n", n, n, timeout)
		pubErrs := burst(n, func(ctx context.Context, i int) error {
			_, err := drv.Node.NodePublishVolume(ctx, publishReq(target(i)))
			return err
		})
		report(b, "publish", pubErrs)
		// Let late unit starts land before looking.
		time.Sleep(5 * time.Second)
		var unrecorded []string
		for i, err := range pubErrs {
			if err != nil && mountedAt(b, target(i)) > 0 && !recorded(stateDir, target(i)) {
				unrecorded = append(unrecorded, target(i))
			}
		}
		fmt.Printf("  failed publishes that left a mount the driver has no record of: %d %v\n", len(unrecorded), first(unrecorded, 3))
		unpubErrs := burst(n, func(ctx context.Context, i int) error {
			_, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target(i)})
			return err
		})
		report(b, "unpublish", unpubErrs)
		// Kubelet retries a failed unpublish: once more, one at a time.
		for i, err := range unpubErrs {
			if err != nil {
				if _, err := drv.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "bench-volume", TargetPath: target(i)}); err != nil {
					fmt.Printf("  unpublish %d failed again: %v\n", i, err)
				}
			}
		}
		left := 0
		for i := 0; i < n; i++ {
			left += mountedAt(b, target(i))
		}
		units, _ := sd.Systemctl("list-units", "--all", "--plain", "--no-legend", "mount-s3-*")
		dirs, _ := os.ReadDir(stateDir)
		nunits := 0
		for _, line := range strings.Split(strings.TrimSpace(units), "\n") {
			if strings.TrimSpace(line) != "" {
				nunits++
			}
		}
		fmt.Printf("  after the unpublishes (failed ones retried once): %d mounts at the targets, %d units, %d state directories\n",
			left, nunits, len(dirs))
	}
}

// burst runs call for 0..n-1 at once, each with kubelet's 2-minute operation deadline.
func burst(n int, call func(context.Context, int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			errs[i] = call(ctx, i)
		}(i)
	}
	wg.Wait()
	return errs
}

func report(b *testing.B, what string, errs []error) {
	byCode := map[string]int{}
	ok, notRetryable := 0, 0
	var sample []string
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		c := status.Code(err)
		byCode[c.String()]++
		if !retryable[c] {
			notRetryable++
		}
		if len(sample) < 2 {
			sample = append(sample, err.Error())
		}
	}
	keys := make([]string, 0, len(byCode))
	for k := range byCode {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, byCode[k]))
	}
	fmt.Printf("  %-9s succeeded %d of %d; failed: %s; not retryable: %d\n", what, ok, len(errs), strings.Join(parts, ", "), notRetryable)
	for _, s := range sample {
		fmt.Printf("    e.g. %s\n", s)
	}
}

// mountedAt counts the mounts at path.
func mountedAt(b *testing.B, path string) int {
	entries, err := mounttable.Table{}.List()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.MountPoint == path {
			n++
		}
	}
	return n
}

// recorded reports whether systemd mode keeps a state directory for target (its record).
func recorded(stateDir, target string) bool {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(stateDir, e.Name(), "mount.json"))
		if err == nil && strings.Contains(string(data), strconv.Quote(target)) {
			return true
		}
	}
	return false
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
