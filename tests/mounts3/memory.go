package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The memory model of mount-s3 1.24.0 (CONFORMANCE.md, rows R1-R6). mount-s3 bounds the
// buffers it reads and writes through by a memory target: --memory-target <MiB>, else
// max(floor(0.95 x the memory it may use), 512 MiB), where the memory it may use is the
// smallest cgroup memory limit on the path from its own cgroup up to the root, or RAM
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3/src/cli.rs, CliArgs::memory_limit_setting;
// mountpoint-s3-fs/src/memory/limiter.rs, effective_total_memory; sysinfo v0.39.6
// src/unix/linux/cgroup.rs). Of the target, max(128 MiB, target/8) is kept for what is not a
// data buffer; the rest is the data-buffer budget (limiter.rs, data_buffer_budget_for).

const (
	mib = 1 << 20

	// minMemoryTarget is mount-s3's MINIMUM_MEM_LIMIT (limiter.rs).
	minMemoryTarget = 512 * mib

	// modelOverhead is the stand-in's own runtime overhead beyond the target, reached when
	// its buffers fill the data-buffer budget: a MODEL figure, not read from mount-s3 (whose
	// allocator, CRT connection buffers and thread stacks are not counted by its pool). It
	// stands for what a memory limit set just above the target must leave room for.
	modelOverhead = 64 * mib
)

// memTarget is the memory target mount-s3 decided, with where it came from.
type memTarget struct {
	bytes  uint64
	user   bool   // given with --memory-target (MemoryLimitSetting::User)
	source string // for the start-up log line
}

// reserveFor is mount-s3's additional_mem_reserved_for: the part of a target kept for
// metadata and other non-buffer memory.
func reserveFor(target uint64) uint64 { return max(target/8, 128*mib) }

// budgetFor is mount-s3's data_buffer_budget_for.
func budgetFor(target uint64) uint64 {
	if r := reserveFor(target); r < target {
		return target - r
	}
	return 0
}

// sysPaths locates the kernel interfaces the target is read from (tests point them at
// fixtures).
type sysPaths struct {
	proc   string // "/proc"
	cgroup string // "/sys/fs/cgroup"
}

var hostPaths = sysPaths{proc: "/proc", cgroup: "/sys/fs/cgroup"}

// decideMemoryTarget returns the memory target for o, as mount-s3 computes it at start-up.
func decideMemoryTarget(o *Options, sp sysPaths, pid int) memTarget {
	if o.HasMemoryTarget {
		return memTarget{bytes: o.MemoryTarget * mib, user: true, source: "--memory-target"}
	}
	total, what := sp.effectiveTotalMemory(pid)
	t := uint64(float64(total) * 0.95)
	src := fmt.Sprintf("95%% of %s, %d MiB", what, total/mib)
	if t < minMemoryTarget {
		t, src = minMemoryTarget, "the minimum of 512 MiB; 95% of "+what+" is less"
	}
	return memTarget{bytes: t, source: src}
}

// effectiveTotalMemory is mount-s3's effective_total_memory: the cgroup limits of the
// process (its cgroup and every ancestor), else those of the cgroup root visible to it, else
// the RAM. A cgroup attempt that finds no limit yields the RAM, as sysinfo's does.
func (sp sysPaths) effectiveTotalMemory(pid int) (uint64, string) {
	ram, ok := sp.memTotal()
	if ok {
		if cg, err := os.ReadFile(fmt.Sprintf("%s/%d/cgroup", sp.proc, pid)); err == nil {
			if rel, ok := cgroupPath(string(cg)); ok {
				if t, what, ok := sp.cgroupLimits(rel, ram); ok {
					return t, what
				}
			}
		}
		if t, what, ok := sp.cgroupLimits("", ram); ok {
			return t, what
		}
	}
	return ram, "RAM"
}

// memTotal reads MemTotal from meminfo, in bytes.
func (sp sysPaths) memTotal() (uint64, bool) {
	b, err := os.ReadFile(sp.proc + "/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if n, err := strconv.ParseUint(strings.Fields(v + " x")[0], 10, 64); err == nil {
				return n * 1024, true
			}
		}
	}
	return 0, false
}

// cgroupPath picks, as sysinfo does, the cgroup of the memory controller from a
// /proc/<pid>/cgroup text: the unified ("0::") line or a v1 line naming "memory", whichever
// comes first, without its leading "/".
func cgroupPath(text string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) < 3 {
			continue
		}
		memory := false
		for _, c := range strings.Split(f[1], ",") {
			memory = memory || c == "memory"
		}
		if (f[0] == "0" && f[1] == "") || memory {
			rel, ok := strings.CutPrefix(f[2], "/")
			return rel, ok
		}
	}
	return "", false
}

// cgroupLimits walks from the cgroup rel (relative to the hierarchy root; "" is the root)
// up to the root in cgroup v2, then v1, and returns min(RAM, every limit on the way). It
// fails where sysinfo's does: the cgroup's own usage or stat file unreadable, or an
// ancestor with a limit whose usage is unreadable.
func (sp sysPaths) cgroupLimits(rel string, ram uint64) (uint64, string, bool) {
	v2 := func(p string) uint64 {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) == "max" {
			return ^uint64(0)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return ^uint64(0)
		}
		return n
	}
	root := sp.cgroup
	if t, what, ok := walkLimits(root, rel, ram, "memory.max", "memory.current", "anon", v2, true); ok {
		return t, what, true
	}
	v1 := func(p string) uint64 {
		if n, ok := readU64(p); ok {
			return n
		}
		return ^uint64(0)
	}
	return walkLimits(root+"/memory", rel, ram, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_rss", v1, false)
}

// walkLimits is sysinfo's memory_limits for one hierarchy. Paths are joined and shortened
// lexically, as Rust's Path::join and Path::ancestors do.
func walkLimits(root, rel string, ram uint64, limitFile, usageFile, statKey string, limit func(string) uint64, missingLimitOK bool) (uint64, string, bool) {
	base := root
	if rel != "" {
		base = root + "/" + rel
	}
	baseLimit := limit(base + "/" + limitFile)
	if !missingLimitOK {
		if _, ok := readU64(base + "/" + limitFile); !ok {
			return 0, "", false
		}
	}
	if _, ok := readU64(base + "/" + usageFile); !ok {
		return 0, "", false
	}
	total, what := ram, "RAM"
	for p := base; ; {
		l := baseLimit
		if p != base {
			l = limit(p + "/" + limitFile)
		}
		if l <= ram {
			if _, ok := readU64(p + "/" + usageFile); !ok {
				return 0, "", false
			}
			if l < total {
				total, what = l, "the memory limit of cgroup "+p
			}
		}
		if strings.TrimRight(p, "/") == strings.TrimRight(root, "/") {
			break
		}
		i := strings.LastIndex(strings.TrimRight(p, "/"), "/")
		if i < 0 {
			return 0, "", false
		}
		p = strings.TrimRight(p, "/")[:i]
		if p == "" {
			return 0, "", false
		}
	}
	if !statHas(base+"/memory.stat", statKey) {
		return 0, "", false
	}
	return total, what, true
}

func readU64(p string) (uint64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// statHas reports whether a memory.stat file has a numeric key.
func statHas(p, key string) bool {
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			_, err := strconv.ParseUint(strings.Fields(v + " x")[0], 10, 64)
			return err == nil
		}
	}
	return false
}

// humanBinary formats n bytes as humansize's BINARY options do (mount-s3's format_size):
// the largest unit below 1024 of B, KiB, MiB, GiB, ..., two decimals unless whole.
func humanBinary(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == float64(uint64(v)) {
		return strconv.FormatFloat(v, 'f', 0, 64) + " " + units[i]
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + units[i]
}

// partSizes are the read and write part sizes mount-s3 uses.
type partSizes struct{ read, write uint64 }

// validateParts is mount-s3's PartConfig::validate (awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3-fs/src/s3/config.rs): a read part above the data-buffer budget fails start-up
// with an explicit target and is clamped (with a warning) to the budget otherwise. The client
// then checks both sizes against 5 MiB-5 GiB (newS3Client).
func validateParts(o *Options, t memTarget, log *logger) (partSizes, error) {
	p := partSizes{read: 8 * mib, write: 8 * mib}
	if o.PartSize != 0 {
		p.read, p.write = o.PartSize, o.PartSize
	}
	if o.ReadPartSize != 0 {
		p.read = o.ReadPartSize
	}
	if o.WritePartSize != 0 {
		p.write = o.WritePartSize
	}
	b := budgetFor(t.bytes)
	if p.read > b {
		r := t.bytes - b
		if t.user {
			return p, fmt.Errorf("read part size (%s) exceeds the memory available for data buffers (%s). The memory target is %s, of which %s is reserved for Mountpoint overhead. Increase --memory-target or decrease --read-part-size.",
				humanBinary(p.read), humanBinary(b), humanBinary(t.bytes), humanBinary(r))
		}
		log.printf("WARN read part size (%s) exceeds the memory available for data buffers (%s). The auto-detected memory target is %s, of which %s is reserved for Mountpoint overhead. Clamping read part size to %s.",
			humanBinary(p.read), humanBinary(b), humanBinary(t.bytes), humanBinary(r), humanBinary(b))
		p.read = b
	}
	return p, nil
}

// writeCapFor is how many files mount-s3 lets be open for writing at once: the write buffer
// budget (the data-buffer budget less one read part kept for reads, at least the 1 MiB cache
// block) over the write part size (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/
// memory/write_handle_limiter.rs, WriteHandleLimiter::new; memory/limiter.rs,
// write_buffer_budget_for).
func writeCapFor(target uint64, p partSizes) int {
	b, r := budgetFor(target), max(p.read, 1*mib)
	if b <= r || p.write == 0 {
		return 0
	}
	return int((b - r) / p.write)
}
