package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// mounted is a live FUSE session. dir is the mount point as given when this process mounted
// it, "" when the caller handed over an already-mounted /dev/fd/N (the caller owns that
// mount).
type mounted struct {
	srv      *fuse.Server
	dir      string
	sigs     chan os.Signal // SIGINT, SIGTERM, SIGHUP: delivered once the session exists
	commFD   *os.File       // fusermount's socket, held open for auto_unmount
	cacheDir string         // <cache>/mountpoint-cache, removed when the session ends
}

// mountFS mounts root and completes the FUSE INIT handshake, so the mount answers requests
// as soon as Serve runs. A directory is mounted as the official mount-s3 build mounts it,
// through libfuse 2 (fuse2Mount); a handed-over /dev/fd/N is only served.
func mountFS(o *Options, root *dirNode, negTTL time.Duration, stderr io.Writer) (*mounted, error) {
	fo := &fs.Options{RootStableAttr: &fs.StableAttr{Ino: 1}}
	if negTTL > 0 {
		fo.NegativeTimeout = &negTTL
	}
	raw := fs.NewNodeFS(root, fo)
	raw = &aclFS{RawFileSystem: raw, acl: aclOf(o), owner: uint32(os.Geteuid())}
	m := &mounted{}
	fd, handover := parseFuseFD(o.MountPoint)
	if !handover {
		var err error
		if fd, m.commFD, err = fuse2Mount(o, stderr); err != nil {
			return nil, err
		}
		m.dir = o.MountPoint
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
		if m.dir != "" {
			_ = unix.Unmount(m.dir, unix.MNT_DETACH)
		}
		return nil, err
	}
	m.srv = srv
	return m, nil
}

// fuse2Mount mounts a directory as libfuse 2.9.9's fuse_mount_compat25 does for mount-s3's
// options (libfuse/libfuse@fuse-2.9.9:lib/mount.c, fuse_kern_mount and fuse_mount_sys;
// lib/mount_util.c, fuse_mnt_check_empty; the options as fuser passes them,
// awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fuser/src/mnt/mount_options.rs,
// option_to_string, and session.rs, Session::new): a directory with entries is refused; with
// --auto-unmount, or when mount(2) answers EPERM, fusermount mounts; otherwise mount(2) with
// source "mountpoint-s3", type "fuse", MS_NOSUID|MS_NODEV|MS_NOATIME (+MS_RDONLY) and
// "default_permissions[,allow_other],fd=N,rootmode=40000,user_id=UID,group_id=GID" (the real
// uid and gid). libfuse's messages go to stderr; the returned error is the cause under
// "Failed to create FUSE session" (errno as Rust prints it, "Unspecified Error" where
// libfuse leaves no errno, an assumption: which errno it leaves was not read).
func fuse2Mount(o *Options, stderr io.Writer) (int, *os.File, error) {
	mnt := o.MountPoint
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		fmt.Fprintf(stderr, "fuse: failed to access mountpoint %s: %s\n", mnt, strerror(err))
		return -1, nil, errors.New(rustIOErr(err))
	}
	empty := st.Size == 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		var err error
		if empty, err = dirEmpty(mnt); err != nil {
			fmt.Fprintf(stderr, "fuse: failed to open mountpoint for reading: %s\n", strerror(err))
			return -1, nil, errors.New(rustIOErr(err))
		}
	}
	if !empty {
		fmt.Fprintf(stderr, "fuse: mountpoint is not empty\nfuse: if you are sure this is safe, use the 'nonempty' mount option\n")
		return -1, nil, errors.New("Unspecified Error")
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME)
	flagOpts := "rw,nosuid,nodev,noatime"
	if o.ReadOnly {
		flags |= unix.MS_RDONLY
		flagOpts = "ro,nosuid,nodev,noatime"
	}
	kernelOpts := "default_permissions"
	if o.AllowRoot || o.AllowOther || o.AutoUnmount {
		// fuser passes --allow-root as allow_other (its ACL narrows it), and adds allow_other
		// to --auto-unmount alone (fusermount needs one of them).
		kernelOpts += ",allow_other"
	}
	fmOpts := flagOpts + "," + kernelOpts + ",fsname=" + fsName
	if o.AutoUnmount {
		return fusermountMount(mnt, fmOpts+",auto_unmount", true, stderr)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
			fmt.Fprintf(stderr, "fuse: device not found, try 'modprobe fuse' first\n")
		} else {
			fmt.Fprintf(stderr, "fuse: failed to open /dev/fuse: %s\n", strerror(err))
		}
		return -1, nil, errors.New(rustIOErr(err))
	}
	data := fmt.Sprintf("%s,fd=%d,rootmode=%o,user_id=%d,group_id=%d", kernelOpts, fd, st.Mode&unix.S_IFMT, os.Getuid(), os.Getgid())
	err = unix.Mount(fsName, mnt, "fuse", flags, data)
	switch {
	case errors.Is(err, unix.EPERM):
		unix.Close(fd)
		return fusermountMount(mnt, fmOpts, false, stderr)
	case err != nil:
		fmt.Fprintf(stderr, "fuse: mount failed: %s\n", strerror(err))
		unix.Close(fd)
		return -1, nil, errors.New(rustIOErr(err))
	}
	return fd, nil, nil
}

// fusermountMount has fusermount mount mnt and hand back the FUSE descriptor over a socket,
// as libfuse 2's fuse_mount_fusermount does: "fusermount -o OPTS -- MNT" with _FUSE_COMMFD,
// looked for in /bin (libfuse's FUSERMOUNT_DIR for Debian's build: an assumption, not read)
// and then in PATH. With auto_unmount fusermount stays, and unmounts when the socket closes
// (when mount-s3 exits, however it exits); the socket is returned to be held open.
func fusermountMount(mnt, opts string, autoUnmount bool, stderr io.Writer) (int, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(stderr, "fuse: socketpair() failed: %s\n", strerror(err))
		return -1, nil, errors.New(rustIOErr(err))
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "fusermount-comm"), os.NewFile(uintptr(fds[1]), "fusermount-comm")
	defer theirs.Close()
	prog := "/bin/fusermount"
	if _, err := os.Stat(prog); err != nil {
		prog, _ = exec.LookPath("fusermount")
	}
	if prog == "" {
		fmt.Fprintf(stderr, "fuse: failed to exec fusermount: No such file or directory\n")
		ours.Close()
		return -1, nil, errors.New("Unspecified Error")
	}
	cmd := &exec.Cmd{Path: prog, Args: []string{"fusermount", "-o", opts, "--", mnt},
		Env: append(os.Environ(), "_FUSE_COMMFD=3"), Stdout: os.Stdout, Stderr: stderr, ExtraFiles: []*os.File{theirs}}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "fuse: failed to exec fusermount: %s\n", strerror(err))
		ours.Close()
		return -1, nil, errors.New("Unspecified Error")
	}
	theirs.Close()
	fd, rerr := receiveFD(fds[0])
	if !autoUnmount {
		ours.Close()
		_ = cmd.Wait()
	} else {
		go func() { _ = cmd.Wait() }()
	}
	if rerr != nil {
		if autoUnmount {
			ours.Close()
		}
		return -1, nil, errors.New("Unspecified Error")
	}
	if !autoUnmount {
		ours = nil
	}
	return fd, ours, nil
}

// receiveFD reads the descriptor fusermount sends (SCM_RIGHTS); EOF means it failed.
func receiveFD(sock int) (int, error) {
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, 0)
	if err != nil {
		return -1, err
	}
	if n == 0 {
		return -1, io.EOF
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return -1, errors.New("no control message")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) == 0 {
		return -1, errors.New("no descriptor")
	}
	unix.CloseOnExec(fds[0])
	return fds[0], nil
}

// strerror is the C library's text for err ("Operation not permitted").
func strerror(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return err.Error()
	}
	t := en.Error()
	if t == "" {
		return t
	}
	return strings.ToUpper(t[:1]) + t[1:]
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

// serve runs the FUSE loop, calls ready once it runs, and returns the exit code, 0 (S1, S2;
// awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/fuse/session.rs, FuseSession::join).
// The session ends when the file system is unmounted (the kernel ends the connection with
// its last mount) or on SIGINT, SIGTERM or SIGHUP. Then the cache directory is removed and,
// for a mount made here, mount-s3's libfuse 2 build calls umount(path) once, unconditionally
// (mountpoint-s3-fuser/src/mnt/fuse2.rs, Drop for Mount): after an outside unmount this
// unmounts whatever has been mounted at the path since, and a busy mount is left in place
// (dead once this process is gone). A handed-over /dev/fd/N is left to its owner; the
// connection ends with this process.
func serve(m *mounted, log *logger, ready func()) int {
	done := m.start()
	ready()
	select {
	case <-done:
		log.printf("all FUSE workers exited, shutting down Mountpoint")
	case <-m.sigs:
		log.printf("received interrupt signal, shutting down Mountpoint")
	}
	if m.cacheDir != "" {
		if err := os.RemoveAll(m.cacheDir); err != nil {
			log.printf("ERROR failed to remove cache sub-directory: %v", err)
		}
	}
	if m.dir != "" {
		log.printf("attempting unmount")
		m.umount(log)
	}
	return 0
}

// umount is libfuse 2 Mount's drop: umount(path); on EPERM, fuse_unmount_compat22 (a lazy
// unmount, then, not as root, "fusermount -u -q -z"); any other failure is logged.
func (m *mounted) umount(log *logger) {
	err := unix.Unmount(m.dir, 0)
	switch {
	case err == nil:
	case errors.Is(err, unix.EPERM):
		if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil && os.Geteuid() != 0 {
			if prog, lerr := exec.LookPath("fusermount"); lerr == nil {
				_ = (&exec.Cmd{Path: prog, Args: []string{"fusermount", "-u", "-q", "-z", "--", m.dir}}).Run()
			}
		}
	default:
		log.printf("WARN umount failed with %v", err)
	}
}

// notifySignals starts delivery of SIGINT, SIGTERM and SIGHUP (ctrlc's "termination"
// feature). mount-s3 installs the handler only once its FUSE session exists; until then
// these signals have their default action.
func notifySignals() chan os.Signal {
	c := make(chan os.Signal, 2)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	return c
}
