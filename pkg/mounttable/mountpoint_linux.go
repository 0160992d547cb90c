package mounttable

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mounted reports whether something is mounted at path without reading the mount table: path
// is a mount point when its mount ID differs from its parent directory's (statx(2)
// STATX_MNT_ID, Linux 5.8 and later). The file system is not asked (AT_STATX_DONT_SYNC: a FUSE
// daemon that does not answer cannot block it, a dead one cannot fail it) and a link at path is
// not followed. A path that does not exist is not mounted. known is false when the kernel
// cannot tell (no STATX_MNT_ID, any other error) and for a Table with a Path of its own (a
// test's table, which the file system does not reflect): read the table then. On a node with
// a thousand mounts this costs two system calls where a read of the table costs milliseconds.
func (t Table) Mounted(path string) (mounted, known bool) {
	if t.Path != "" || filepath.Dir(path) == path {
		return false, false // a test's table; the root, which has no parent to compare with
	}
	id, err := mountID(path, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, true
	}
	if err != nil {
		return false, false
	}
	parent, err := mountID(filepath.Dir(path), 0)
	if err != nil {
		return false, false
	}
	return id != parent, true
}

// mountID returns the ID of the mount holding path.
func mountID(path string, flags int) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, flags|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err != nil {
		return 0, err
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return 0, errors.ErrUnsupported
	}
	return st.Mnt_id, nil
}
