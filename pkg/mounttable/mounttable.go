// Package mounttable reads the kernel's mount table (/proc/self/mountinfo) and says what counts
// as a mount-s3 mount and as the driver's guard. It never touches a mounted path: whether a
// mount is alive is pkg/mounthealth's question. Both mount modes and the node server use it, so
// they agree on what a mount is.
package mounttable

import (
	"fmt"
	"strings"

	"k8s.io/mount-utils"
)

// FSName is the filesystem name mount-s3 registers; it is the source column of its mounts.
const FSName = "mountpoint-s3"

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
	for i := range entries {
		entries[i].MountPoint = unescape(entries[i].MountPoint)
		entries[i].Root = unescape(entries[i].Root)
	}
	return entries, nil
}

// unescape undoes the kernel's octal escapes in mountinfo paths (space \040, tab \011,
// newline \012, backslash \134), which mount-utils leaves in place, so that mount points
// compare equal to the paths they are.
func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
