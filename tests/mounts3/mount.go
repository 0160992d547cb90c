package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fsName is the mount source shown in /proc/self/mountinfo, as for the real mount-s3.
const fsName = "mountpoint-s3"

// mounted is a live FUSE session. dir is the mount point when this process mounted it, ""
// when the caller handed over an already-mounted /dev/fd/N (the caller owns that mount).
type mounted struct {
	srv *fuse.Server
	dir string
}

// parseFuseFD recognises the "/dev/fd/N" mount point form (N > 0).
func parseFuseFD(mp string) (int, bool) {
	rest, ok := strings.CutPrefix(mp, "/dev/fd/")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n > 0
}

// checkMountPoint makes mount-s3's checks of its mount point before anything else happens
// (CONFORMANCE.md, rows M1-M7):
//   - "/dev/fd/N": N must be an open descriptor of /dev/fuse opened read-write, and the options
//     that belong to the mount(2) call (--read-only, --auto-unmount) are refused, since the
//     caller already made that call;
//   - a directory: it must exist, be a directory, and not already be a mount point (any mount
//     at exactly that path in /proc/self/mountinfo, whatever its type: a guard, a dead FUSE
//     mount, a bind).
func checkMountPoint(o *Options) error {
	mp := o.MountPoint
	wrap := func(msg string) error { return fmt.Errorf("Failed to create mount point\n\nCaused by:\n    %s", msg) }
	if fd, ok := parseFuseFD(mp); ok {
		if err := checkFuseFD(fd); err != nil {
			return wrap(fmt.Sprintf("mount point %s is not a valid FUSE file descriptor: %v", mp, err))
		}
		var ignored []string
		if o.ReadOnly {
			ignored = append(ignored, "--read-only")
		}
		if o.AutoUnmount {
			ignored = append(ignored, "--auto-unmount")
		}
		if len(ignored) > 0 {
			return fmt.Errorf("Mount options: %s are ignored with FUSE fd mount point. Mount options should be passed while performing mount syscall in the caller process.", strings.Join(ignored, ", "))
		}
		return nil
	}
	st, err := os.Stat(mp)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return wrap(fmt.Sprintf("mount point %s does not exist", mp))
	case err != nil:
		return wrap(fmt.Sprintf("mount point %s is not accessible: %v", mp, err))
	case !st.IsDir():
		return wrap(fmt.Sprintf("mount point %s is not a directory", mp))
	}
	abs, err := filepath.Abs(mp)
	if err != nil {
		return wrap(err.Error())
	}
	if mountedAt(abs) {
		return wrap(fmt.Sprintf("mount point %s is already mounted", mp))
	}
	return nil
}

// checkFuseFD checks that fd is open on /dev/fuse (character device 10:229) for reading and
// writing.
func checkFuseFD(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229 {
		return errors.New("not /dev/fuse")
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if fl&unix.O_ACCMODE != unix.O_RDWR {
		return errors.New("not opened for reading and writing")
	}
	return nil
}

// mountedAt reports whether /proc/self/mountinfo has a mount at exactly path (field 5, with
// the kernel's octal escapes undone). An unreadable table is no error: the check is a
// best-effort one in mount-s3 as well.
func mountedAt(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeOctal(f[4]) == path {
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

// mountFS mounts root and completes the FUSE INIT handshake, so the mount answers requests
// as soon as Serve runs. For a directory it opens /dev/fuse and calls mount(2) itself, with
// source "mountpoint-s3", type "fuse" (no subtype), MS_NOSUID|MS_NODEV|MS_NOATIME (+MS_RDONLY
// for --read-only) and "fd=N,rootmode=40000,user_id=EUID,group_id=EGID,default_permissions"
// (+",allow_other" for --allow-other/--allow-root); go-fuse then serves the fd through its
// "/dev/fd/N" mount point form. For a handed-over /dev/fd/N it only serves the fd.
func mountFS(o *Options, root *dirNode, negTTL time.Duration) (*mounted, error) {
	fo := &fs.Options{RootStableAttr: &fs.StableAttr{Ino: 1}}
	if negTTL > 0 {
		fo.NegativeTimeout = &negTTL
	}
	raw := fs.NewNodeFS(root, fo)
	raw = &aclFS{RawFileSystem: raw, acl: aclOf(o), owner: uint32(os.Geteuid())}
	fd, handover := parseFuseFD(o.MountPoint)
	dir := ""
	if !handover {
		var err error
		if dir, err = filepath.Abs(o.MountPoint); err != nil {
			return nil, err
		}
		if fd, err = unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("open /dev/fuse: %w", err)
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME)
		if o.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d,default_permissions", fd, os.Geteuid(), os.Getegid())
		if o.AllowOther || o.AllowRoot {
			data += ",allow_other"
		}
		if err := unix.Mount(fsName, dir, "fuse", flags, data); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("mount(2) of %s failed: %w", dir, err)
		}
	}
	srv, err := fuse.NewServer(raw, "/dev/fd/"+strconv.Itoa(fd), &fuse.MountOptions{
		Name:               fsName,
		FsName:             fsName,
		MaxWrite:           1 << 20,
		MaxBackground:      64,
		DisableReadDirPlus: true,
		// Without ATOMIC_O_TRUNC the kernel strips O_TRUNC from OPEN and truncates with a
		// separate SETATTR, so overwrite rules could not see O_TRUNC.
		ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
	})
	if err != nil {
		if dir != "" {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		return nil, fmt.Errorf("FUSE session setup failed: %w", err)
	}
	return &mounted{srv: srv, dir: dir}, nil
}

// start runs the FUSE loop in a goroutine and returns a channel closed when it ends. For a
// mount made here it then performs go-fuse's "poll hack" (what fuse.Server.WaitMount does
// for ordinary mounts, but skips for /dev/fd/N): opening and polling the magic file
// ".go-fuse-epoll-hack" makes the kernel get ENOSYS for POLL once and never send POLL again.
// Without it, a Go process that opens files on a FUSE mount it serves itself can deadlock in
// epoll_ctl -> FUSE_POLL when few OS threads are available (seen on 2 cores).
func (m *mounted) start() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		m.srv.Serve()
		close(done)
	}()
	if m.dir != "" {
		if fd, err := unix.Open(filepath.Join(m.dir, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
			unix.Close(fd)
		}
	}
	return done
}

// unmount detaches the mount this process made (lazily if it is busy). The serve loop then
// sees ENODEV and returns.
func (m *mounted) unmount() error {
	if m.dir == "" {
		return nil
	}
	err := unix.Unmount(m.dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(m.dir, unix.MNT_DETACH)
	}
	if errors.Is(err, unix.EINVAL) { // already unmounted
		err = nil
	}
	return err
}

// serve runs the FUSE loop, calls ready once it runs, and returns the exit code: 0 when the
// file system is unmounted from outside, or after SIGTERM/SIGINT (then this process unmounts
// its own mount first; a handed-over /dev/fd/N is left to its owner and the fd is closed by
// exiting, which aborts the FUSE connection).
func serve(m *mounted, log *logger, sigs <-chan os.Signal, ready func()) int {
	done := m.start()
	ready()
	select {
	case <-done:
		log.printf("file system unmounted, exiting")
		return 0
	case s := <-sigs:
		log.printf("received %v, unmounting", s)
		if m.dir == "" {
			return 0
		}
		if err := m.unmount(); err != nil {
			log.printf("unmount %s failed: %v", m.dir, err)
			return 1
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			log.printf("FUSE loop did not stop 10s after unmount, exiting anyway")
		}
		return 0
	}
}

// notifySignals starts delivery of SIGTERM/SIGINT; call it before mounting so no signal can
// kill the process between mount(2) and serve.
func notifySignals() chan os.Signal {
	c := make(chan os.Signal, 2)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	return c
}

// sessionACL is who may use the mount, as mount-s3 configures its FUSE session (fuser's
// SessionACL): the session owner (mount-s3's effective uid) only by default, root and the owner
// with --allow-root, everyone with --allow-other (CONFORMANCE.md, rows A1-A4).
type sessionACL int

const (
	aclOwner sessionACL = iota
	aclRootAndOwner
	aclAll
)

func aclOf(o *Options) sessionACL {
	switch {
	case o.AllowOther:
		return aclAll
	case o.AllowRoot:
		return aclRootAndOwner
	}
	return aclOwner
}

// aclFS refuses with EACCES the requests of callers the session ACL leaves out, as fuser's
// dispatch does: every operation but those the kernel may send without the caller's uid
// (init, destroy, read, readdir, forget, write, fsync, fsyncdir, release, releasedir; here:
// those on handles already open). The kernel's own check (allow_other) comes first; this one
// also applies to a mount made by someone else and handed over as /dev/fd/N.
type aclFS struct {
	fuse.RawFileSystem
	acl   sessionACL
	owner uint32
}

// gate answers EACCES to callers the ACL leaves out, and passes the rest on.
func (a *aclFS) gate(h *fuse.InHeader, pass func() fuse.Status) fuse.Status {
	switch {
	case a.acl == aclAll, h.Uid == a.owner, a.acl == aclRootAndOwner && h.Uid == 0:
		return pass()
	}
	return fuse.EACCES
}

func (a *aclFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Lookup(c, h, name, out) })
}

func (a *aclFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.GetAttr(c, in, out) })
}

func (a *aclFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.SetAttr(c, in, out) })
}

func (a *aclFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Access(c, in) })
}

func (a *aclFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Open(c, in, out) })
}

func (a *aclFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.OpenDir(c, in, out) })
}

func (a *aclFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Create(c, in, name, out) })
}

func (a *aclFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Mknod(c, in, name, out) })
}

func (a *aclFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Mkdir(c, in, name, out) })
}

func (a *aclFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Unlink(c, h, name) })
}

func (a *aclFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Rmdir(c, h, name) })
}

func (a *aclFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Rename(c, in, oldName, newName) })
}

func (a *aclFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Flush(c, in) })
}

func (a *aclFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.StatFs(c, h, out) })
}
