package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// burstBytes is the object the read burst reads: big enough that mount-s3's read-ahead
// window (1 MiB + 128 KiB doubling, CONFORMANCE.md R3) fills the data-buffer budget at either
// target below: the window after 575 MiB asks for 1152 MiB, of which the object must hold
// more than the larger budget (601 MiB at 729).
const burstBytes = 1280 << 20

// testMemoryTarget (docs/sizing.md, "mount-s3's memory target"): pod mode, Mountpoint Pods
// limited to 768Mi, one sequential read of 1.25 GiB each. With the memory target the node plugin
// derives from the limit (768 − max(128, 768/4) = 576 MiB) mount-s3 stays below the limit and
// the read completes, with no restart. With the target mount-s3 picks itself when it is given
// none (95% of its cgroup's limit: 729 MiB, set here as the volume's own memory-target, as the
// driver gave none before) the same read takes it past the limit: the kernel kills it and the
// workload sees MountOOMKilled. The figures (peak resident size of mount-s3, sampled, and
// its cgroup's peak) are logged for docs/sizing.md.
func testMemoryTarget(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "memtarget")
	h2c := corev1.MountPropagationHostToContainer
	for _, c := range []struct {
		name         string
		mountOptions []string
		target       string // the --memory-target mount-s3 runs with
		survives     bool
	}{
		{"derived", nil, "576", true},
		{"mount-s3-own", []string{"memory-target=729"}, "729", false},
	} {
		bucket := "memtarget-" + c.name + "-" + suffix()
		env.s3.CreateBucket(t, bucket)
		sparseObject(t, bucket, "big", burstBytes)
		claim := staticVolume(t, ns, c.name, bucket, volumeOpts{mountOptions: c.mountOptions,
			attributes: map[string]string{"mountpointMemoryLimit": "768Mi"}})
		w := workload(t, ns, c.name, claim, podOpts{propagation: &h2c})
		waitRunning(t, 2*time.Minute, w)

		pids := harness.MountS3PIDs(bucket)
		if len(pids) != 1 {
			t.Fatalf("%s: %d mount-s3 processes serve bucket %s, want 1", c.name, len(pids), bucket)
		}
		pid := pids[0]
		if args := cmdline(pid); !slices.Contains(args, "--memory-target="+c.target) {
			t.Errorf("%s: mount-s3 runs with %q, want --memory-target=%s", c.name, args, c.target)
		}
		cg := memoryCgroup(pid)
		stop := sampleRSS(pid)
		start := time.Now()
		out, err := execIn(t, w, "cat /data/big | wc -c")
		took := time.Since(start)
		peak := stop()
		cgPeak := readCgroupBytes(cg, "memory.max_usage_in_bytes")
		t.Logf("%s: --memory-target=%s under a 768Mi limit: read %q (%v) in %v; mount-s3 peak RSS %d MiB (sampled every 50 ms), its cgroup's peak %d MiB",
			c.name, c.target, strings.TrimSpace(out), err, took.Round(time.Millisecond), peak>>20, cgPeak>>20)

		if c.survives {
			if err != nil || strings.TrimSpace(out) != strconv.Itoa(burstBytes) {
				t.Errorf("%s: read %q, %v; want all %d bytes", c.name, out, err, burstBytes)
			}
			if got := eventReasons(t, ns, w.Name); slices.Contains(got, "MountOOMKilled") || slices.Contains(got, "MountDead") {
				t.Errorf("%s: workload events %v: mount-s3 died under its derived target", c.name, got)
			}
			if !alive(pid) {
				t.Errorf("%s: mount-s3 (pid %d) is gone after the read", c.name, pid)
			}
			if peak < 400<<20 || peak >= 768<<20 {
				t.Errorf("%s: mount-s3's peak RSS %d MiB; want the budget filled (over 400 MiB) and below the 768 MiB limit", c.name, peak>>20)
			}
		} else {
			harness.Eventually(t, 2*time.Minute, func() string {
				for _, e := range eventsOn(t, ns, w.Name) {
					if e.Reason == "MountOOMKilled" && strings.Contains(e.Message, "OOM-killed at its memory limit 768Mi") {
						return ""
					}
				}
				return fmt.Sprintf("no MountOOMKilled event naming the 768Mi limit on the workload: %v", eventReasons(t, ns, w.Name))
			})
			if err == nil && strings.TrimSpace(out) == strconv.Itoa(burstBytes) {
				t.Errorf("%s: the read completed although mount-s3 was OOM-killed", c.name)
			}
		}
		deletePods(t, w)
	}
	expectClean(t)
}

// sparseObject makes object key of n bytes (zeros) in bucket as a sparse file of the S3
// server's posix back end: no upload, no disk.
func sparseObject(t *testing.T, bucket, key string, n int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(rig.S3DataDir(), bucket, key))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	harness.Must(t, f.Truncate(n))
}

// cmdline returns a process's arguments.
func cmdline(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// statusBytes reads a "kB" field of /proc/<pid>/status in bytes (0 when gone).
func statusBytes(pid int, field string) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// sampleRSS samples a process's resident size every 50 ms (its VmHWM is lost with it when the
// kernel kills it) until the returned function is called, which returns the peak seen.
func sampleRSS(pid int) func() uint64 {
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			v := max(statusBytes(pid, "VmRSS"), statusBytes(pid, "VmHWM"))
			mu.Lock()
			peak = max(peak, v)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// memoryCgroup returns the directory of a process's memory cgroup (v1 on the rig's host, v2
// where the unified line is all there is), or "".
func memoryCgroup(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) < 3 {
			continue
		}
		if slices.Contains(strings.Split(f[1], ","), "memory") {
			return filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
		if f[0] == "0" && f[1] == "" {
			return filepath.Join("/sys/fs/cgroup", f[2])
		}
	}
	return ""
}

// readCgroupBytes reads a byte count of cgroup dir (v1 name; the v2 memory.peak instead of
// memory.max_usage_in_bytes), 0 when unknown.
func readCgroupBytes(dir, v1 string) uint64 {
	if dir == "" {
		return 0
	}
	for _, name := range []string{v1, "memory.peak"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return n
			}
		}
	}
	return 0
}
