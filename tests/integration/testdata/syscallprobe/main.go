// Command syscallprobe makes system calls that the driver's units must not be able to make,
// with harmless arguments, and prints "<call> <errno name or ok>" for each. TestUnitsConfined
// runs it inside a unit with the driver's sandbox and inside one without the system call filter.
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	report := func(name string, err error) {
		if err == nil {
			fmt.Printf("%s ok\n", name)
			return
		}
		fmt.Printf("%s %s\n", name, unix.ErrnoName(err.(unix.Errno)))
	}
	// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create=0).
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffe), 0)
	report("keyctl", errOf(e))
	// bpf(BPF_MAP_CREATE) with an empty attribute: EINVAL when the call is allowed.
	var attr [64]byte
	_, _, e = unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	report("bpf", errOf(e))
	// perf_event_open of a software clock on this process.
	pa := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Bits: unix.PerfBitDisabled}
	pa.Size = uint32(unsafe.Sizeof(pa))
	fd, err := unix.PerfEventOpen(&pa, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	report("perf_event_open", err)
	// swapoff of a path that is no swap area: EINVAL or ENOENT when allowed.
	path, _ := unix.BytePtrFromString("/nonexistent-swap")
	_, _, e = unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(path)), 0, 0)
	report("swapoff", errOf(e))
	// quotactl(Q_SYNC) on no device.
	_, _, e = unix.Syscall6(unix.SYS_QUOTACTL, 0x800001, 0, 0, 0, 0, 0)
	report("quotactl", errOf(e))
}

func errOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
