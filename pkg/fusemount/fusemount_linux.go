// Package fusemount makes the FUSE mounts whose connection a mount-s3 started by the driver
// serves from a handed-over descriptor (mount-s3's "/dev/fd/N" mount point): pod mode's node
// plugin for its Mountpoint Pods, and systemd mode's scality-fuse-helper for its units.
package fusemount

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// mountFlags are the per-mount flags of every mount Mount makes.
const mountFlags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOATIME

// RemountReadOnly makes the bind mount at path, of a mount Mount made, read-only. A remount of a
// bind sets all of its per-mount flags at once, so one with MS_RDONLY alone would drop nosuid
// and nodev: Mount's flags are given again.
func RemountReadOnly(path string) error {
	return unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|mountFlags, "")
}

// Mount opens /dev/fuse and mounts it at source, returning the descriptor mount-s3 will serve.
// The mount is owned by root (user_id=0) and checked by the kernel against the file modes
// mount-s3 reports (default_permissions); allow_other is set when users other than the mount's
// owner may come in (mount-s3's --allow-other, or --allow-root, which mount-s3 narrows to root
// and its own user). The caller closes the descriptor.
func Mount(source string, allowOther, readOnly bool) (*os.File, error) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	flags := uintptr(mountFlags)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions", f.Fd())
	if allowOther {
		opts += ",allow_other"
	}
	if err := unix.Mount(mounttable.FSName, source, "fuse", flags, opts); err != nil {
		f.Close()
		return nil, fmt.Errorf("mount FUSE at %s: %w", source, err)
	}
	return f, nil
}

// AtDir runs mount with /proc/self/fd/<n> of target opened as a directory without following a
// link at its last component: the mount lands on the directory that was checked, never where a
// link swapped in since would lead.
func AtDir(target string, mount func(at string) error) error {
	return InDir(target, func(_ int, at string) error { return mount(at) })
}

// InDir is AtDir for calls that take the directory's fd (move_mount) as well as its path.
func InDir(target string, mount func(fd int, at string) error) error {
	fd, err := unix.Open(target, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s as a directory (no link followed): %w", target, err)
	}
	defer unix.Close(fd)
	return mount(fd, fmt.Sprintf("/proc/self/fd/%d", fd))
}
