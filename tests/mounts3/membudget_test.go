package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Binary-level tests of the memory model (CONFORMANCE.md, rows R1-R6): the target the
// stand-in decides in a real cgroup, and what a read burst makes of its memory there.

// testCgroup is a memory cgroup made for one test (v2 when the machine has the unified
// memory controller, else v1), removed at cleanup once empty.
type testCgroup struct {
	dir string
	v2  bool
}

// newCgroup makes a cgroup with memory limit limit (0: none) under parent (nil: the root).
func newCgroup(t *testing.T, parent *testCgroup, limit uint64) *testCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "s3csi-mounts3-" + hex.EncodeToString(b[:])
	cg := &testCgroup{}
	switch {
	case parent != nil:
		cg.dir, cg.v2 = filepath.Join(parent.dir, name), parent.v2
	case fileHas("/sys/fs/cgroup/cgroup.subtree_control", "memory"):
		cg.dir, cg.v2 = filepath.Join("/sys/fs/cgroup", name), true
	case dirExists("/sys/fs/cgroup/memory"):
		cg.dir = filepath.Join("/sys/fs/cgroup/memory", name)
	default:
		t.Skip("no memory cgroup controller")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := os.Remove(cg.dir); err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
				return
			}
		}
	})
	if cg.v2 && parent == nil {
		_ = os.WriteFile(filepath.Join(cg.dir, "cgroup.subtree_control"), []byte("+memory"), 0o644)
	}
	if cg.v2 && parent != nil {
		_ = os.WriteFile(filepath.Join(parent.dir, "cgroup.subtree_control"), []byte("+memory"), 0o644)
	}
	if limit > 0 {
		file := "memory.limit_in_bytes"
		if cg.v2 {
			file = "memory.max"
		}
		if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
		if cg.v2 {
			_ = os.WriteFile(filepath.Join(cg.dir, "memory.swap.max"), []byte("0"), 0o644)
		}
	}
	return cg
}

// oomKills is how many processes the kernel's OOM killer ended in the cgroup.
func (cg *testCgroup) oomKills() int {
	file, key := "memory.oom_control", "oom_kill "
	if cg.v2 {
		file, key = "memory.events", "oom_kill "
	}
	b, _ := os.ReadFile(filepath.Join(cg.dir, file))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// command returns a command that runs the stand-in with args inside the cgroup.
func (cg *testCgroup) command(args ...string) *exec.Cmd {
	script := `echo $$ > "$CG/cgroup.procs" && exec "$0" "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, standinBin}, args...)...)
	cmd.Env = []string{"CG=" + cg.dir}
	return cmd
}

func fileHas(p, word string) bool {
	b, err := os.ReadFile(p)
	return err == nil && strings.Contains(" "+string(b)+" ", " "+strings.TrimSpace(word))
}

func dirExists(p string) bool { st, err := os.Stat(p); return err == nil && st.IsDir() }

// memoryLine runs the stand-in in the foreground inside cg (or outside it, cg nil) against an
// endpoint that refuses connections and returns its "memory target" log line.
func memoryLine(t *testing.T, cg *testCgroup, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"bkt", dir, "--foreground", "--endpoint-url", "http://127.0.0.1:1"}, extra...)
	var cmd *exec.Cmd
	if cg != nil {
		cmd = cg.command(args...)
	} else {
		cmd = exec.Command(standinBin, args...)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "AWS_MAX_ATTEMPTS=1", "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "HOME="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	m := regexp.MustCompile(`memory target [^\n]*`).FindString(string(out))
	if m == "" {
		t.Fatalf("no memory target line in:\n%s", out)
	}
	return m
}

// TestMemoryTargetDecided (row R1): the start-up log says what target mount-s3 took: the
// explicit one, else 95% of the cgroup limit (its own or an ancestor's), at least 512 MiB.
func TestMemoryTargetDecided(t *testing.T) {
	needFUSE(t)
	if got := memoryLine(t, nil, "--memory-target", "1024"); !strings.HasPrefix(got, "memory target 1024 MiB (--memory-target); data-buffer budget 896 MiB") {
		t.Errorf("explicit: %q", got)
	}
	limited := newCgroup(t, nil, 1<<30)
	if got := memoryLine(t, limited); !regexp.MustCompile(`^memory target 972 MiB \(95% of the memory limit of cgroup .*` + regexp.QuoteMeta(filepath.Base(limited.dir)) + `, 1024 MiB\); data-buffer budget 844 MiB$`).MatchString(got) {
		t.Errorf("in a cgroup limited to 1 GiB: %q", got)
	}
	child := newCgroup(t, limited, 0)
	if got := memoryLine(t, child); !strings.Contains(got, "memory target 972 MiB (95% of the memory limit of cgroup "+limited.dir+", 1024 MiB)") {
		t.Errorf("in a child of a cgroup limited to 1 GiB: %q", got)
	}
	small := newCgroup(t, nil, 300<<20)
	if got := memoryLine(t, small); !strings.HasPrefix(got, "memory target 512 MiB (the minimum of 512 MiB") {
		t.Errorf("in a cgroup limited to 300 MiB: %q", got)
	}
	if got := memoryLine(t, small, "--memory-target", "600"); !strings.HasPrefix(got, "memory target 600 MiB (--memory-target)") {
		t.Errorf("explicit in a cgroup: %q", got)
	}
}

// TestWriteHandleCap (row R6): the files open for writing at once are capped by the budget;
// one more open for writing fails with ENOMEM, and the slot comes back on close. The cap is
// logged as mount-s3 logs it.
func TestWriteHandleCap(t *testing.T) {
	f := newFixture(t, "bkt-writecap")
	dir, _ := mountDir(t)
	_, _, output := startForeground(t, f.env, nil, f.args(dir, "--memory-target", "512", "--write-part-size", "209715200")...)
	waitServing(t, dir, output)
	if !strings.Contains(output(), "max files concurrently open for write: 1 (memory target 512 MiB, write part size 200 MiB)") {
		t.Errorf("output lacks the write cap line:\n%s", output())
	}
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Create(filepath.Join(dir, "b"))
	wantErrno(t, "a second file open for writing", err, syscall.ENOMEM)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write slot back", func() bool {
		b, err := os.Create(filepath.Join(dir, "b"))
		if err == nil {
			b.Close()
		}
		return err == nil
	})
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
}

// sparseObject puts an object of n zero bytes into the fixture's bucket without writing them
// (versitygw's posix backend serves the file as it is).
func sparseObject(t *testing.T, f *fixture, key string, n int64) {
	t.Helper()
	p := filepath.Join(f.s3.DataDir, f.bucket, key)
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(n); err != nil {
		t.Fatal(err)
	}
}

// peakRSS is a process's VmHWM in bytes.
func peakRSS(pid int) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			return n << 10
		}
	}
	return 0
}

// burst mounts the fixture's bucket in the background inside cg and reads big (1 GiB)
// sequentially; it returns the daemon's pid, the bytes read and the read error.
func burst(t *testing.T, f *fixture, cg *testCgroup, extra ...string) (int, int64, error) {
	t.Helper()
	sparseObject(t, f, "big", 1<<30)
	dir, pidFile := mountDir(t)
	cmd := cg.command(f.args(dir, extra...)...)
	cmd.Env = append(cmd.Env, f.env.list()...)
	cmd.Env = append(cmd.Env, "UNSTABLE_MOUNTPOINT_PID_FILE="+pidFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount-s3: %v\n%s", err, out)
	}
	pid := readPid(pidFile)
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	fh, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		return pid, 0, err
	}
	defer fh.Close()
	n, err := io.CopyBuffer(io.Discard, fh, make([]byte, 1<<20))
	return pid, n, err
}

// TestReadBurstWithinTarget (rows R3, R4): with --memory-target well below its cgroup's limit,
// a sequential read of 1 GiB grows the read-ahead window to the data-buffer budget and keeps
// the stand-in under target + modelOverhead (plus the Go runtime's own few MiB): it survives.
func TestReadBurstWithinTarget(t *testing.T) {
	f := newFixture(t, "bkt-burst-target")
	cg := newCgroup(t, nil, 800<<20)
	pid, n, err := burst(t, f, cg, "--memory-target", "512")
	if err != nil || n != 1<<30 {
		t.Fatalf("read %d bytes, %v; want all of 1 GiB (OOM kills: %d)", n, err, cg.oomKills())
	}
	peak := peakRSS(pid)
	if limit := uint64(512<<20 + modelOverhead + 48<<20); peak > limit || peak < 400<<20 {
		t.Errorf("peak RSS %d MiB; want between 400 MiB (the budget filled) and %d MiB", peak>>20, limit>>20)
	}
	if k := cg.oomKills(); k != 0 || !alive(pid) {
		t.Errorf("%d OOM kills, alive %t", k, alive(pid))
	}
	t.Logf("peak RSS %d MiB with --memory-target 512 in an 800 MiB cgroup", peak>>20)
}

// TestReadBurstPastLimitWithoutTarget (rows R1, R4): without --memory-target the target is 95%
// of the cgroup's limit, so a read burst takes the stand-in past the limit (target +
// modelOverhead) and the kernel kills it.
func TestReadBurstPastLimitWithoutTarget(t *testing.T) {
	f := newFixture(t, "bkt-burst-oom")
	cg := newCgroup(t, nil, 600<<20)
	pid, n, err := burst(t, f, cg)
	if err == nil && n == 1<<30 {
		t.Fatalf("read all of 1 GiB through a stand-in limited to 600 MiB with no --memory-target: want it killed (peak %d MiB)", peakRSS(pid)>>20)
	}
	waitFor(t, "the stand-in to be gone", func() bool { return !alive(pid) })
	if k := cg.oomKills(); k == 0 {
		t.Errorf("read ended (%d bytes, %v) but the cgroup saw no OOM kill", n, err)
	}
}
