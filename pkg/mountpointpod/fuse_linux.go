package mountpointpod

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The FUSE device's numbers (fixed by the kernel: misc major, FUSE_MINOR).
const (
	fuseMajor = 10
	fuseMinor = 229
)

// checkFUSE refuses a descriptor that is not the FUSE device. File.Fd also puts the
// descriptor in blocking mode, which is what mount-s3 expects of it.
func checkFUSE(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("inspect the received descriptor: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != fuseMajor || unix.Minor(st.Rdev) != fuseMinor {
		return fmt.Errorf("the received descriptor is not /dev/fuse (character device %d:%d)", fuseMajor, fuseMinor)
	}
	return nil
}

// childAttr makes mount-s3 a process group of its own (signals for the pod, or a terminal's
// group, do not reach it) that is killed when this process dies, as in a container.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
