package mounttable

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// statmount(2) (Linux 6.8; the source string from 6.13), from include/uapi/linux/mount.h.
const (
	statmountSBBasic   = 0x1   // STATMOUNT_SB_BASIC: sb_dev_major/minor, sb_magic, sb_flags
	statmountMntBasic  = 0x2   // STATMOUNT_MNT_BASIC: mnt_id*, mnt_parent_id*, mnt_attr, propagation
	statmountMntRoot   = 0x8   // STATMOUNT_MNT_ROOT
	statmountMntPoint  = 0x10  // STATMOUNT_MNT_POINT
	statmountFSType    = 0x20  // STATMOUNT_FS_TYPE
	statmountMntOpts   = 0x80  // STATMOUNT_MNT_OPTS: the file system's own options
	statmountFSSubtype = 0x100 // STATMOUNT_FS_SUBTYPE
	statmountSBSource  = 0x200 // STATMOUNT_SB_SOURCE

	statmountAsk = statmountSBBasic | statmountMntBasic | statmountMntRoot | statmountMntPoint |
		statmountFSType | statmountMntOpts | statmountFSSubtype | statmountSBSource
	// statmountNeed is what a reply must carry to stand for a line of the table. The other
	// strings are left out of a reply when empty (a file system without options or subtype).
	statmountNeed = statmountSBBasic | statmountMntBasic | statmountMntPoint | statmountFSType | statmountSBSource

	mntIDReqSize0  = 24  // MNT_ID_REQ_SIZE_VER0: size, spare, mnt_id, param
	statmountFixed = 512 // sizeof(struct statmount) before its strings

	// A reply holds a few paths and option strings; one larger than this is not read.
	statmountFirst = 4 << 10
	statmountMax   = 64 << 10

	sbRdonly      = 0x1     // SB_RDONLY
	sbSynchronous = 0x10    // SB_SYNCHRONOUS
	sbDirsync     = 0x80    // SB_DIRSYNC
	sbLazytime    = 1 << 25 // SB_LAZYTIME

	mountAttrRdonly      = 0x1      // MOUNT_ATTR_RDONLY
	mountAttrNosuid      = 0x2      // MOUNT_ATTR_NOSUID
	mountAttrNodev       = 0x4      // MOUNT_ATTR_NODEV
	mountAttrNoexec      = 0x8      // MOUNT_ATTR_NOEXEC
	mountAttrAtime       = 0x70     // MOUNT_ATTR__ATIME: RELATIME (0), NOATIME, STRICTATIME
	mountAttrNoatime     = 0x10     // MOUNT_ATTR_NOATIME
	mountAttrStrictatime = 0x20     // MOUNT_ATTR_STRICTATIME
	mountAttrNodiratime  = 0x80     // MOUNT_ATTR_NODIRATIME
	mountAttrIdmap       = 0x100000 // MOUNT_ATTR_IDMAP
	mountAttrNosymfollow = 0x200000 // MOUNT_ATTR_NOSYMFOLLOW
)

// errStatmount is a reply that cannot stand for a line of the table (an older kernel).
var errStatmount = errors.New("statmount: reply lacks fields")

// At returns the mounts stacked at path, bottom to top, as List would (the entries of the table
// whose mount point is path, in the table's order), without reading the table: statx(2)
// STATX_MNT_ID_UNIQUE names the mount holding path, and statmount(2) describes it and, while
// their mount point is path too, the mounts below it. A path that is no mount point, or does not
// exist, has none. As in Mounted, a link at path is not followed and the file system at path is
// not asked. The entries carry every field List's do; MountOptions and SuperOptions are built
// from the flags and options statmount returns, in the table's order.
//
// known is false when the kernel cannot answer this way (before Linux 6.13, or any other error)
// and for a Table with a Path of its own: read the table then. On a node with a thousand mounts
// this costs a few system calls where a read of the table costs milliseconds.
func (t Table) At(path string) (stack []Entry, known bool) {
	if t.Path != "" || !filepath.IsAbs(path) {
		return nil, false
	}
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &st)
	if errors.Is(err, unix.ENOENT) {
		return nil, true
	}
	if err != nil || st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return nil, false
	}
	buf := make([]byte, statmountFirst)
	for id := st.Mnt_id; ; {
		e, parent, err := statmount(id, &buf)
		if err != nil {
			return nil, false
		}
		if e.MountPoint != path {
			break // the mount path is in, or the one below the bottom of the stack
		}
		stack = append(stack, e)
		if parent == id {
			break // the root of the namespace
		}
		id = parent
	}
	for i, j := 0, len(stack)-1; i < j; i, j = i+1, j-1 {
		stack[i], stack[j] = stack[j], stack[i]
	}
	return stack, true
}

// statmount describes the mount with the unique ID id and returns its parent's unique ID. buf
// is grown (up to statmountMax) when the reply does not fit.
func statmount(id uint64, buf *[]byte) (Entry, uint64, error) {
	var req [mntIDReqSize0]byte
	binary.NativeEndian.PutUint32(req[0:], mntIDReqSize0)
	binary.NativeEndian.PutUint64(req[8:], id)
	binary.NativeEndian.PutUint64(req[16:], statmountAsk)
	for {
		b := *buf
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
		if errno == unix.EOVERFLOW && len(b) < statmountMax {
			*buf = make([]byte, 2*len(b))
			continue
		}
		if errno != 0 {
			return Entry{}, 0, errno
		}
		return decodeStatmount(b)
	}
}

// decodeStatmount reads a struct statmount (include/uapi/linux/mount.h) into an Entry.
func decodeStatmount(b []byte) (Entry, uint64, error) {
	u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	u64 := func(off int) uint64 { return binary.NativeEndian.Uint64(b[off:]) }
	size := int(u32(0))
	if size < statmountFixed || size > len(b) {
		return Entry{}, 0, errStatmount
	}
	mask := u64(8)
	if mask&statmountNeed != statmountNeed {
		return Entry{}, 0, errStatmount
	}
	strs := b[statmountFixed:size]
	str := func(bit uint64, off int) (string, bool) {
		if mask&bit == 0 {
			return "", true
		}
		o := int(u32(off))
		if o >= len(strs) {
			return "", false
		}
		s := strs[o:]
		n := 0
		for n < len(s) && s[n] != 0 {
			n++
		}
		if n == len(s) {
			return "", false // not terminated inside the reply
		}
		return string(s[:n]), true
	}
	opts, ok1 := str(statmountMntOpts, 4)
	fsType, ok2 := str(statmountFSType, 36)
	root, ok3 := str(statmountMntRoot, 104)
	point, ok4 := str(statmountMntPoint, 108)
	subtype, ok5 := str(statmountFSSubtype, 120)
	source, ok6 := str(statmountSBSource, 124)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return Entry{}, 0, errStatmount
	}
	if subtype != "" {
		fsType += "." + subtype
	}
	e := Entry{
		ID: int(u32(56)), ParentID: int(u32(60)),
		Major: int(u32(16)), Minor: int(u32(20)),
		Root: root, MountPoint: point, FsType: fsType, Source: source,
		MountOptions: mountOptions(u64(64)),
		SuperOptions: superOptions(u32(32), opts),
	}
	return e, u64(48), nil
}

// mountOptions writes a mount's flags (mnt_attr) as the table's fifth field does
// (fs/proc_namespace.c show_mnt_opts, after "ro" or "rw").
func mountOptions(attr uint64) string {
	o := []string{"rw"}
	if attr&mountAttrRdonly != 0 {
		o[0] = "ro"
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{attr&mountAttrNosuid != 0, "nosuid"},
		{attr&mountAttrNodev != 0, "nodev"},
		{attr&mountAttrNoexec != 0, "noexec"},
		{attr&mountAttrAtime == mountAttrNoatime, "noatime"},
		{attr&mountAttrNodiratime != 0, "nodiratime"},
		{attr&mountAttrAtime == 0, "relatime"},
		{attr&mountAttrNosymfollow != 0, "nosymfollow"},
		{attr&mountAttrIdmap != 0, "idmapped"},
	} {
		if f.set {
			o = append(o, f.name)
		}
	}
	return strings.Join(o, ",")
}

// superOptions writes a superblock's flags and its file system's options as the table's last
// field does (fs/proc_namespace.c show_sb_opts and the file system's show_options).
func superOptions(flags uint32, fsOpts string) string {
	o := []string{"rw"}
	if flags&sbRdonly != 0 {
		o[0] = "ro"
	}
	if flags&sbSynchronous != 0 {
		o = append(o, "sync")
	}
	if flags&sbDirsync != 0 {
		o = append(o, "dirsync")
	}
	if flags&sbLazytime != 0 {
		o = append(o, "lazytime")
	}
	if fsOpts != "" {
		o = append(o, fsOpts)
	}
	return strings.Join(o, ",")
}
