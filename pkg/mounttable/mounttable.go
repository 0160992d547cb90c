// Package mounttable reads the kernel's mount table (/proc/self/mountinfo) and says what counts
// as a mount-s3 mount and as the driver's guard. It never touches a mounted path: whether a
// mount is alive is pkg/mounthealth's question. Both mount modes and the node server use it, so
// they agree on what a mount is.
package mounttable

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FSName is the filesystem name mount-s3 registers; it is the source column of its mounts.
const FSName = "mountpoint-s3"

// Entry is one line of /proc/self/mountinfo (proc(5)), its paths unescaped.
type Entry struct {
	// ID and ParentID are the mount's and its parent's IDs.
	ID, ParentID int
	// Major and Minor are the device number of the mount's filesystem: a mount and its bind
	// mounts share them (one FUSE connection, say).
	Major, Minor int
	// Root is the directory of the filesystem mounted (a bind mount's subdirectory).
	Root string
	// MountPoint is where it is mounted.
	MountPoint string
	// MountOptions are the per-mount options, comma-separated (e.g. "rw,nosuid").
	MountOptions string
	// FsType is the filesystem type (e.g. "fuse", "tmpfs").
	FsType string
	// Source is the mount source (for mount-s3: FSName).
	Source string
	// SuperOptions are the superblock options, comma-separated.
	SuperOptions string
}

// SameFileSystem reports whether e and o are mounts of one file system (the same device
// number: a mount and its bind mounts, served by one FUSE connection).
func (e *Entry) SameFileSystem(o *Entry) bool { return e.Major == o.Major && e.Minor == o.Minor }

// IsMountS3 reports whether e is a FUSE mount served by mount-s3 (or a bind mount of one).
func IsMountS3(e *Entry) bool {
	return e != nil && e.Source == FSName && (e.FsType == "fuse" || len(e.FsType) > 5 && e.FsType[:5] == "fuse.")
}

// GuardSource is the source name of the guard that releases before ADR 0008's change mounted
// at every target under mount-s3's mount: an empty read-only tmpfs, so that the target showed
// it instead of the node's disk once that mount vanished. This release binds mount-s3's mount
// twice instead and mounts no guard, but targets published by an earlier release keep theirs
// until their unpublish, which removes it with the rest.
const GuardSource = "s3csi-guard"

// IsGuard reports whether e is the driver's guard mount.
func IsGuard(e *Entry) bool {
	return e != nil && e.Source == GuardSource && e.FsType == "tmpfs"
}

// Table reads mount tables. The zero value reads /proc/self/mountinfo.
type Table struct {
	// Path overrides the mountinfo file (tests).
	Path string
}

// List returns every mount entry.
//
// The table is parsed here rather than by k8s.io/mount-utils, which took about ten times
// as long and as much memory on a node with thousands of mounts (the mount monitor reads it
// every sweep, a publish several times). A cache that re-reads only when the kernel flags a
// change (poll(2) POLLPRI on an open mountinfo, proc(5)) was tried and dropped: on this
// project's Linux 6.18 test machine, with other mounts changing, the flag came up to 2 s late
// or not at all after an unmount, so a cached table would have shown mounts already gone.
func (t Table) List() ([]Entry, error) {
	data, err := readAll(t.path())
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return parse(data)
}

// buffers are read buffers, kept between reads: a proc file has no size to read up front, and
// growing a buffer for each read made most of a sweep's garbage.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// readAll reads a file into one string of exactly its size.
func readAll(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the mount table, or a test's copy of one
	if err != nil {
		return "", err
	}
	defer f.Close()
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := (*bp)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
	}
	*bp = buf
	return string(buf), nil
}

func (t Table) path() string {
	if t.Path != "" {
		return t.Path
	}
	return "/proc/self/mountinfo"
}

// parse reads mountinfo lines: "ID parentID major:minor root mountpoint options [optional
// fields...] - fstype source superoptions" (proc(5)). The fields are substrings of data.
func parse(data string) ([]Entry, error) {
	out := make([]Entry, 0, strings.Count(data, "\n"))
	for data != "" {
		var line string
		line, data, _ = strings.Cut(data, "\n")
		if line == "" {
			continue
		}
		e, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("read mount table: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

func parseLine(line string) (Entry, error) {
	var f [6]string
	rest := line
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, " "); !ok {
			return Entry{}, fmt.Errorf("mountinfo line %q: too few fields", line)
		}
	}
	// Zero or more optional fields end with a lone "-".
	if r, ok := strings.CutPrefix(rest, "- "); ok {
		rest = r
	} else if _, r, ok := strings.Cut(rest, " - "); ok {
		rest = r
	} else {
		return Entry{}, fmt.Errorf("mountinfo line %q: no separator", line)
	}
	fstype, rest, ok1 := strings.Cut(rest, " ")
	source, super, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return Entry{}, fmt.Errorf("mountinfo line %q: too few fields after the separator", line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	maj, min, ok := strings.Cut(f[2], ":")
	major, err3 := strconv.Atoi(maj)
	minor, err4 := strconv.Atoi(min)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !ok {
		return Entry{}, fmt.Errorf("mountinfo line %q: bad IDs or device number", line)
	}
	return Entry{ID: id, ParentID: parent, Major: major, Minor: minor, Root: unescape(f[3]), MountPoint: unescape(f[4]),
		MountOptions: f[5], FsType: unescape(fstype), Source: unescape(source), SuperOptions: super}, nil
}

// unescape undoes the kernel's octal escapes in mountinfo fields (space \040, tab \011,
// newline \012, backslash \134), so that mount points compare equal to the paths they are.
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
