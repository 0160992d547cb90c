package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Unit tests of the memory model (CONFORMANCE.md, rows R1-R6); the binary-level ones are in
// membudget_test.go.

// fakeSys builds a /proc and /sys/fs/cgroup for one process (pid 42) in dir: files maps a path
// under dir to its content.
func fakeSys(t *testing.T, files map[string]string) sysPaths {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sysPaths{proc: filepath.Join(dir, "proc"), cgroup: filepath.Join(dir, "cg")}
}

// TestEffectiveTotalMemory (row R1): the smallest limit on the way from the process's cgroup
// to the root (v2, then v1), else RAM; sysinfo's failure cases fall back as its do.
func TestEffectiveTotalMemory(t *testing.T) {
	const ram = "MemTotal:       8388608 kB\n" // 8 GiB
	v2 := func(extra map[string]string) map[string]string {
		m := map[string]string{
			"proc/meminfo": ram, "proc/42/cgroup": "0::/kubepods/pod1/c1\n",
			"cg/kubepods/pod1/c1/memory.max": "max\n", "cg/kubepods/pod1/c1/memory.current": "1000\n", "cg/kubepods/pod1/c1/memory.stat": "anon 5\nfile 6\n",
			"cg/kubepods/pod1/memory.max": "1073741824\n", "cg/kubepods/pod1/memory.current": "2000\n",
			"cg/kubepods/memory.max": "4294967296\n", "cg/kubepods/memory.current": "3000\n",
		}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		total uint64
		what  string // suffix of the source
	}{
		{"v2 ancestor limit", v2(nil), 1 << 30, "cg/kubepods/pod1"},
		{"v2 own limit lower", v2(map[string]string{"cg/kubepods/pod1/c1/memory.max": "536870912\n"}), 512 << 20, "cg/kubepods/pod1/c1"},
		{"v2 limit above RAM ignored", v2(map[string]string{"cg/kubepods/pod1/memory.max": "17179869184\n", "cg/kubepods/memory.max": "max\n"}), 8 << 30, "RAM"},
		{"v2 ancestor usage unreadable: RAM", v2(map[string]string{"cg/kubepods/pod1/memory.current": ""}), 8 << 30, "RAM"},
		{"v2 no stat: RAM", v2(map[string]string{"cg/kubepods/pod1/c1/memory.stat": ""}), 8 << 30, "RAM"},
		{"v1 memory line first", map[string]string{
			"proc/meminfo": ram, "proc/42/cgroup": "9:name=systemd:/init.scope\n4:memory:/app/x\n0::/init.scope\n",
			"cg/memory/app/x/memory.limit_in_bytes": "9223372036854771712\n", "cg/memory/app/x/memory.usage_in_bytes": "1\n", "cg/memory/app/x/memory.stat": "cache 1\ntotal_rss 7\n",
			"cg/memory/app/memory.limit_in_bytes": "2147483648\n", "cg/memory/app/memory.usage_in_bytes": "1\n",
			"cg/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 2 << 30, "cg/memory/app"},
		{"system level after the process's", map[string]string{
			"proc/meminfo": ram, "proc/42/cgroup": "0::/gone\n",
			"cg/memory.max": "3221225472\n", "cg/memory.current": "1\n", "cg/memory.stat": "anon 1\n",
		}, 3 << 30, "cg"},
		{"nothing readable: RAM", map[string]string{"proc/meminfo": ram}, 8 << 30, "RAM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := fakeSys(t, tc.files)
			total, what := sp.effectiveTotalMemory(42)
			if total != tc.total || !strings.HasSuffix(what, tc.what) {
				t.Errorf("effectiveTotalMemory = %d (%s), want %d (... %s)", total, what, tc.total, tc.what)
			}
		})
	}
}

// TestDecideMemoryTarget (row R1): --memory-target in MiB; else floor(0.95 x the total), at
// least 512 MiB.
func TestDecideMemoryTarget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     Options
		ram   string
		bytes uint64
		user  bool
	}{
		{"explicit", Options{MemoryTarget: 600, HasMemoryTarget: true}, "MemTotal: 8388608 kB\n", 600 << 20, true},
		{"95 percent", Options{}, "MemTotal: 1048576 kB\n", 1020054732, false},
		{"minimum", Options{}, "MemTotal: 524288 kB\n", 512 << 20, false},
		{"no meminfo", Options{}, "", 512 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.ram != "" {
				files["proc/meminfo"] = tc.ram
			}
			got := decideMemoryTarget(&tc.o, fakeSys(t, files), 42)
			if got.bytes != tc.bytes || got.user != tc.user {
				t.Errorf("target %d (user %t, %s), want %d (user %t)", got.bytes, got.user, got.source, tc.bytes, tc.user)
			}
		})
	}
}

// TestBudgetAndWriteCap (rows R2, R6): the reserve is max(128 MiB, target/8); writes get the
// budget less one read part, in write parts.
func TestBudgetAndWriteCap(t *testing.T) {
	for _, tc := range []struct {
		target, budget uint64
		parts          partSizes
		writes         int
	}{
		{512 << 20, 384 << 20, partSizes{8 << 20, 8 << 20}, 47},
		{4 << 30, 3584 << 20, partSizes{8 << 20, 8 << 20}, 447},
		{512 << 20, 384 << 20, partSizes{8 << 20, 200 << 20}, 1},
		{512 << 20, 384 << 20, partSizes{384 << 20, 8 << 20}, 0},
	} {
		if b := budgetFor(tc.target); b != tc.budget {
			t.Errorf("budgetFor(%d MiB) = %d MiB, want %d", tc.target>>20, b>>20, tc.budget>>20)
		}
		if w := writeCapFor(tc.target, tc.parts); w != tc.writes {
			t.Errorf("writeCapFor(%d MiB, %v) = %d, want %d", tc.target>>20, tc.parts, w, tc.writes)
		}
	}
}

// TestHumanBinary: sizes as mount-s3's messages print them (humansize's BINARY).
func TestHumanBinary(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 384 << 20: "384 MiB", 1750 << 20: "1.71 GiB",
		1 << 30: "1 GiB", 1152 << 20: "1.12 GiB", 5<<30 + 1: "5.00 GiB",
	} {
		if got := humanBinary(n); got != want {
			t.Errorf("humanBinary(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestLimiter (rows R3, R4): windows are granted within the budget, a reader's floor always;
// the modelled overhead follows the buffers in use, reaching reserve + modelOverhead at a full
// budget and nothing when idle.
func TestLimiter(t *testing.T) {
	l := newMemLimiter(512 << 20) // budget 384 MiB, overhead 128 + 64 MiB
	if got := l.take(300<<20, initialWindow); got != 300<<20 {
		t.Fatalf("take(300 MiB) = %d MiB", got>>20)
	}
	if got := l.take(200<<20, initialWindow); got != 84<<20 {
		t.Errorf("take(200 MiB) with 84 MiB left = %d MiB, want 84", got>>20)
	}
	if got := l.take(8<<20, initialWindow); got != initialWindow {
		t.Errorf("take beyond the budget = %d, want the floor %d", got, initialWindow)
	}
	inUse, peak, over := l.usage()
	if full := int(reserveFor(512<<20) + modelOverhead); inUse != 384<<20+initialWindow || peak != inUse || over != full {
		t.Errorf("usage = %d, peak %d, overhead %d; want 384 MiB + floor, the same, %d", inUse, peak, over, full)
	}
	l.give(inUse)
	if inUse, _, over := l.usage(); inUse != 0 || over != 0 {
		t.Errorf("after giving everything back: %d in use, %d overhead", inUse, over)
	}
	l.take(192<<20, 0)
	if _, _, over := l.usage(); over < 95<<20 || over > 97<<20 {
		t.Errorf("overhead at half the budget = %d MiB, want about 96", over>>20)
	}
}
