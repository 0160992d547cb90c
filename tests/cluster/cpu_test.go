package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testMountpointCPULimit: pod mode, a volume with mountpointCPULimit 200m. kubelet gives the
// Mountpoint Pod's container the CFS quota of 200m (20000 µs per 100000 µs period), and the
// kernel holds it there: a process spinning in the container's cgroup beside mount-s3 (standing
// for a busy mount-s3) gets about 0.2 CPU and is throttled, while the mount keeps serving its
// workload. The figure is logged (docs/sizing.md); the bound checked is 1.5 times the limit.
// (Systemd mode's cpu.max under PID 1: tests/vm TestCPULimitThroughPID1.)
func testMountpointCPULimit(t *testing.T) {
	setMode(t, "pod")
	ns := newNamespace(t, "cpulimit")
	bucket := "cpulimit-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{attributes: map[string]string{"mountpointCPULimit": "200m"}})
	w := workload(t, ns, "w", claim, podOpts{})
	waitRunning(t, 2*time.Minute, w)
	pids := harness.MountS3PIDs(bucket)
	if len(pids) != 1 {
		t.Fatalf("%d mount-s3 processes serve bucket %s, want 1", len(pids), bucket)
	}
	cpu, acct := cgroupOf(pids[0], "cpu"), cgroupOf(pids[0], "cpuacct")
	if cpu == "" {
		t.Fatalf("no cpu cgroup for mount-s3 (pid %d)", pids[0])
	}
	if q, p := readCgroupInt(t, cpu, "cpu.cfs_quota_us"), readCgroupInt(t, cpu, "cpu.cfs_period_us"); q != 20000 || p != 100000 {
		t.Errorf("the Mountpoint Pod's container has CFS quota %d per %d µs, want 20000 per 100000 (200m)", q, p)
	}

	spinner := exec.Command("sh", "-c", "while :; do :; done")
	harness.Must(t, spinner.Start())
	ended := make(chan struct{})
	go func() { _ = spinner.Wait(); close(ended) }()
	kill := func() { _ = spinner.Process.Kill(); <-ended }
	defer kill() // before the workload goes: kubelet removes the container's cgroup then
	for _, dir := range slices.Compact([]string{cpu, acct}) {
		if dir != "" {
			harness.Must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(spinner.Process.Pid)), 0o644))
		}
	}
	time.Sleep(time.Second)
	c0, th0, w0 := processCPU(t, spinner.Process.Pid), cpuStatField(t, cpu, "nr_throttled"), time.Now()
	time.Sleep(5 * time.Second)
	c1, th1, wall := processCPU(t, spinner.Process.Pid), cpuStatField(t, cpu, "nr_throttled"), time.Since(w0)
	share := (c1 - c0).Seconds() / wall.Seconds()
	t.Logf("a spinner in the Mountpoint Pod's cgroup (limit 200m): %.3f CPU over %v, throttled %d times", share, wall.Round(time.Millisecond), th1-th0)
	if share > 0.3 {
		t.Errorf("the spinner got %.3f CPU under a 200m limit: the quota is not enforced", share)
	}
	if th1 == th0 {
		t.Errorf("the Mountpoint Pod's cgroup was never throttled while the spinner ran")
	}
	if out, err := execIn(t, w, "printf 'while busy\\n' > /data/busy.txt && cat /data/busy.txt"); err != nil || out != "while busy\n" {
		t.Errorf("the mount did not serve while its Mountpoint Pod was at its CPU limit: %q %v", out, err)
	}
	kill()
	deletePods(t, w)
	expectClean(t)
}

// cgroupOf returns the directory of pid's cgroup v1 hierarchy holding controller, "" when none.
func cgroupOf(pid int, controller string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			return filepath.Join("/sys/fs/cgroup", f[1], f[2])
		}
	}
	return ""
}

func readCgroupInt(t *testing.T, dir, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	harness.Must(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	harness.Must(t, err)
	return n
}

// cpuStatField reads one field of a v1 cpu cgroup's cpu.stat.
func cpuStatField(t *testing.T, dir, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	harness.Must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == field {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// processCPU is a process's user and system CPU time (/proc/<pid>/stat, at 100 ticks a second).
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	harness.Must(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
