package pod

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/fusemount"
)

// hostKernel is the kernel of the node: mount(2) and umount2(2).
type hostKernel struct{}

// MountFUSE mounts a FUSE connection at source for a Mountpoint Pod (fusemount.Mount).
func (hostKernel) MountFUSE(source string, allowOther, readOnly bool) (*os.File, error) {
	return fusemount.Mount(source, allowOther, readOnly)
}

// Bind makes target show source; a read-only bind is remounted read-only (a bind ignores
// MS_RDONLY on creation), keeping nosuid and nodev (fusemount.RemountReadOnly).
//
// The bind is a peer group of its own (with its copies: the host's view of the target, and the
// containers that mount it with HostToContainer propagation), not a peer of source. A plain
// bind of the shared mount at source joins its peer group, so every target of a Mountpoint Pod
// would be a peer of every other: a mount stacked on one target (a repair) would be copied onto
// all of them, and its unmount (that workload's unpublish) taken from all of them again,
// leaving the other workloads on a dead mount. So the bind is made as a detached clone
// (open_tree), made private (mount_setattr), then attached (move_mount), where the shared
// kubelet directory makes it shared again with its own copies only. Kernels without these
// calls (before 5.12) get the plain bind.
func (hostKernel) Bind(source, target string, readOnly bool) error {
	err := fusemount.InDir(target, func(fd int, _ string) error { return bindAlone(source, fd) })
	if errors.Is(err, unix.ENOSYS) {
		err = fusemount.AtDir(target, func(at string) error { return unix.Mount(source, at, "", unix.MS_BIND, "") })
	}
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", source, target, err)
	}
	if readOnly {
		// Opened again: the path now leads to the new bind, which is what must turn read-only.
		if err := fusemount.AtDir(target, fusemount.RemountReadOnly); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("make bind mount at %s read-only: %w", target, err)
		}
	}
	return nil
}

// bindAlone attaches a private clone of the mount at source to the directory open as dirFD.
func bindAlone(source string, dirFD int) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", dirFD, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// Unmount removes the top mount at path; a mount that is already gone is fine.
func (hostKernel) Unmount(path string, how unmountHow) error {
	flags := 0
	switch how {
	case detach:
		flags = unix.MNT_DETACH
	case abort:
		flags = unix.MNT_FORCE | unix.MNT_DETACH
	}
	if err := unix.Unmount(path, flags); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// Answer returns once the filesystem at path answers a stat (the daemon took the mount over).
// It blocks as long as the daemon does not answer.
func (hostKernel) Answer(path string) error {
	_, err := os.Stat(path)
	return err
}
