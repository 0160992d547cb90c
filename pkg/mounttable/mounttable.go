// Package mounttable answers "what is mounted at this path?" from the kernel's mount table
// (/proc/self/mountinfo) and a stat of the path, including the corrupted case (a FUSE mount
// whose daemon is gone answers ENOTCONN). Both mount modes and the node server use it, so they
// agree on what counts as a mount-s3 mount.
package mounttable

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/mount-utils"
)

// FSName is the filesystem name mount-s3 registers; it is the source column of its mounts.
const FSName = "mountpoint-s3"

// State is what a path holds.
type State int

const (
	// NotFound: the path does not exist.
	NotFound State = iota
	// NotMounted: the path exists and nothing is mounted on it.
	NotMounted
	// Mounted: a healthy mount is on the path; see Entry for what it is.
	Mounted
	// Corrupted: a mount is on the path but it cannot be accessed (ENOTCONN, ...); it must be
	// unmounted before the path can be used again.
	Corrupted
)

func (s State) String() string {
	return [...]string{"not found", "not mounted", "mounted", "corrupted"}[s]
}

// Entry is one line of /proc/self/mountinfo.
type Entry = mount.MountInfo

// IsMountS3 reports whether e is a FUSE mount served by mount-s3 (or a bind mount of one).
func IsMountS3(e *Entry) bool {
	return e != nil && e.Source == FSName && (e.FsType == "fuse" || len(e.FsType) > 5 && e.FsType[:5] == "fuse.")
}

// GuardSource is the source name of the guard the driver mounts at every target before
// mount-s3's mount: an empty read-only tmpfs. While the mount-s3 mount on top of it lives, the
// guard is hidden; when that mount vanishes (mount-s3 stopped with its unit, say), the target
// shows the guard instead of the node's disk, so writes into it fail (EROFS, also for root in a
// container) instead of landing silently on the node.
const GuardSource = "s3csi-guard"

// GuardOptions are the guard's mount options: tiny, read-only, nothing executable.
const GuardOptions = "size=4k,nr_inodes=2,mode=0555"

// IsGuard reports whether e is the driver's guard mount.
func IsGuard(e *Entry) bool {
	return e != nil && e.Source == GuardSource && e.FsType == "tmpfs"
}

// Table reads mount tables. The zero value reads /proc/self/mountinfo.
type Table struct {
	// Path overrides the mountinfo file (tests).
	Path string
}

func (t Table) path() string {
	if t.Path != "" {
		return t.Path
	}
	return "/proc/self/mountinfo"
}

// List returns every mount entry.
func (t Table) List() ([]Entry, error) {
	entries, err := mount.ParseMountInfo(t.path())
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return entries, nil
}

// Inspect reports what path holds. The entry is the top-most mount on path (the one a process
// sees), or nil when nothing is mounted there.
func (t Table) Inspect(path string) (State, *Entry, error) {
	_, statErr := os.Stat(path)
	switch {
	case statErr == nil:
	case errors.Is(statErr, os.ErrNotExist):
		return NotFound, nil, nil
	case mount.IsCorruptedMnt(statErr):
	default:
		return NotMounted, nil, fmt.Errorf("stat %s: %w", path, statErr)
	}
	entries, err := t.List()
	if err != nil {
		return NotMounted, nil, err
	}
	var top *Entry
	for i := range entries {
		if entries[i].MountPoint == path {
			top = &entries[i]
		}
	}
	switch {
	case statErr != nil:
		return Corrupted, top, nil
	case top == nil:
		return NotMounted, nil, nil
	default:
		return Mounted, top, nil
	}
}
