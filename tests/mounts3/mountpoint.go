package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fdMountPointRE is the "/dev/fd/N" form (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/
// src/fuse/config.rs, parse_fd_from_mount_point): the whole argument, digits only (N = 0
// matches), N an i32; anything else is a directory path.
var fdMountPointRE = regexp.MustCompile(`^/dev/fd/([0-9]+)$`)

// parseFuseFD recognises the "/dev/fd/N" mount point form.
func parseFuseFD(mp string) (int, bool) {
	m := fdMountPointRE.FindStringSubmatch(mp)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 32)
	return int(n), err == nil
}

// checkMountPoint makes mount-s3's checks of its mount point before anything else happens
// (CONFORMANCE.md, rows M1-M7; config.rs, MountPoint::new and FuseSessionConfig::new):
//   - "/dev/fd/N": /proc/self/fd/N must link to exactly /dev/fuse and be open for reading and
//     writing; then the options that belong to the mount(2) call (--read-only,
//     --auto-unmount) are refused, since the caller already made that call;
//   - a directory: stat must succeed (any failure, a dead FUSE mount's ENOTCONN included, is
//     "does not exist"), it must be a directory, and no mount other than autofs may be at
//     exactly that path, compared as given, in /proc/self/mountinfo.
//
// Emptiness is checked later, by the FUSE mount (mountFS).
func checkMountPoint(o *Options) error {
	mp := o.MountPoint
	point := func(msg string) error { return chainError{"Failed to create mount point", msg} }
	if fd, ok := parseFuseFD(mp); ok {
		if msg := checkFuseFD(fd); msg != "" {
			return point(msg)
		}
		var ignored []string
		if o.ReadOnly {
			ignored = append(ignored, "--read-only")
		}
		if o.AutoUnmount {
			ignored = append(ignored, "--auto-unmount")
		}
		if len(ignored) > 0 {
			return fmt.Errorf("Mount options: %s are ignored with FUSE fd mount point.Mount options should be passed while performing `mount` syscall in the caller process.", strings.Join(ignored, ", "))
		}
		return nil
	}
	st, err := os.Stat(mp)
	switch {
	case err != nil:
		return point(fmt.Sprintf("mount point %s does not exist", mp))
	case !st.IsDir():
		return point(fmt.Sprintf("mount point %s is not a directory", mp))
	case mountedAt(mp):
		return point(fmt.Sprintf("mount point %s is already mounted", mp))
	}
	return nil
}

// checkFuseFD is MountPoint::from_fd's check of /dev/fd/N, returning its message on failure
// (the target of a descriptor that is not a file, e.g. "Pipe(1234)", is rendered as procfs's
// FDTarget Debug; the mode as bitflags 2's Debug of procfs's FDPermissions: neither rendering
// was read at the pinned versions).
func checkFuseFD(fd int) string {
	mp := fmt.Sprintf("/dev/fd/%d", fd)
	link := fmt.Sprintf("/proc/self/fd/%d", fd)
	target, err := os.Readlink(link)
	var st unix.Stat_t
	if err == nil {
		err = unix.Lstat(link, &st)
	}
	switch {
	case os.IsNotExist(err):
		return fmt.Sprintf("mount point %s is not a valid file descriptor", mp)
	case err != nil:
		return fmt.Sprintf("failed to get file descriptor information for mount point %s: %v", mp, err)
	case !strings.HasPrefix(target, "/") && strings.Contains(target, ":"):
		return fmt.Sprintf("expected mount point %s to be a /dev/fuse device file descriptor but got %s", mp, fdTargetDebug(target))
	case target != "/dev/fuse":
		return fmt.Sprintf("expected mount point %s to be a /dev/fuse file descriptor but got %s", mp, target)
	case st.Mode&0o600 != 0o600:
		return fmt.Sprintf("expected mount point %s file descriptor to have read and write permissions but got %s", mp, fdPermissionsDebug(st.Mode&0o700))
	}
	return ""
}

// fdTargetDebug renders a non-path /proc/self/fd link as procfs's FDTarget Debug does.
func fdTargetDebug(t string) string {
	kind, rest, _ := strings.Cut(t, ":")
	inner := strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]")
	switch kind {
	case "socket":
		return "Socket(" + inner + ")"
	case "net":
		return "Net(" + inner + ")"
	case "pipe":
		return "Pipe(" + inner + ")"
	case "anon_inode":
		return fmt.Sprintf("AnonInode(%q)", rest)
	}
	return fmt.Sprintf("Other(%q, %s)", kind, inner)
}

// fdPermissionsDebug renders owner permission bits as FDPermissions's Debug.
func fdPermissionsDebug(mode uint32) string {
	var names []string
	for _, b := range []struct {
		bit  uint32
		name string
	}{{0o400, "READ"}, {0o200, "WRITE"}, {0o100, "EXECUTE"}} {
		if mode&b.bit != 0 {
			names = append(names, b.name)
		}
	}
	if len(names) == 0 {
		return "FDPermissions(0x0)"
	}
	return "FDPermissions(" + strings.Join(names, " | ") + ")"
}

// mountedAt reports whether /proc/self/mountinfo has a mount other than autofs at exactly
// path as given (field 5, with the kernel's octal escapes undone; config.rs,
// is_mount_point_in_use). An unreadable table is no error: the check is a best-effort one in
// mount-s3 as well.
func mountedAt(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return err == nil && mountedIn(string(b), path)
}

// mountedIn is mountedAt on a mountinfo text.
func mountedIn(mountinfo, path string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 0 && unescapeOctal(f[4]) == path && g[0] != "autofs" {
			return true
		}
	}
	return false
}

// unescapeOctal undoes the kernel's \NNN escapes of spaces, tabs, newlines and backslashes.
func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// dirEmpty is libfuse 2's fuse_mnt_check_empty for a directory: no entry but "." and "..".
func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0, nil
}
