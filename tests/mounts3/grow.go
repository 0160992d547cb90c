package main

import (
	"path"
	"strconv"
	"strings"
	"sync"
)

// A TEST HOOK, not a behaviour of mount-s3: opening an object whose base name is
// .s3csi-standin-grow-<MiB> for reading makes the stand-in allocate and touch that many MiB
// more and keep them for its life, beyond the memory model of buffers.go (which bounds what
// reads take by the memory target). It lets the driver's memory limits (Mountpoint Pod
// resources, systemd units' MemoryMax) meet a real cgroup's OOM killer at will, where the
// kernel kills a daemon past its limit. Keys without the prefix are untouched, and nothing else
// triggers it.
const growPrefix = ".s3csi-standin-grow-"

// maxGrowMiB bounds one request (a typo must not take a test machine's memory).
const maxGrowMiB = 4096

var (
	grownMu sync.Mutex
	grown   [][]byte // kept: the memory stays in use
)

// growOnDemand applies the hook for key (see growPrefix).
func growOnDemand(key string) {
	n, ok := strings.CutPrefix(path.Base(key), growPrefix)
	if !ok {
		return
	}
	mib, err := strconv.Atoi(n)
	if err != nil || mib <= 0 || mib > maxGrowMiB {
		return
	}
	grownMu.Lock()
	defer grownMu.Unlock()
	for range mib {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page: resident, charged to the cgroup
		}
		grown = append(grown, b)
	}
}
