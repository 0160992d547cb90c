package main

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// enterManagerNamespace moves the calling goroutine, for the rest of the process, into the mount
// namespace of the helper's parent: the systemd manager that runs it as a "+" command of a unit
// with a mount namespace of its own (--mount-s3-protect-system). systemd 252 runs such commands
// in the unit's namespace (ADR 0010), where a FUSE mount or a bind would stay invisible to the
// host, kubelet and the workloads; in the manager's namespace they land where the node plugin
// and kubelet see them. Nothing is done when the parent's namespace is already the helper's.
//
// A Go process has several threads, and setns(CLONE_NEWNS) refuses a thread that shares its
// file system attributes (root, working directory) with others: the goroutine is locked to its
// thread, which first takes a copy of them of its own (unshare(CLONE_FS)). The thread is never
// unlocked, so no other goroutine runs in the manager's namespace and this one never leaves it;
// every path the caller opens or mounts afterwards is looked up there.
func enterManagerNamespace() error {
	runtime.LockOSThread()
	ppid := os.Getppid()
	if ppid <= 0 {
		return fmt.Errorf("no parent process to take the mount namespace of (parent %d)", ppid)
	}
	target := fmt.Sprintf("/proc/%d/ns/mnt", ppid)
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the manager's mount namespace %s: %w", target, err)
	}
	defer unix.Close(fd)
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(fd, &theirs); err != nil {
		return fmt.Errorf("stat %s: %w", target, err)
	}
	if err := unix.Stat("/proc/thread-self/ns/mnt", &ours); err != nil {
		return fmt.Errorf("stat the helper's own mount namespace: %w", err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("take a copy of the file system attributes before entering the manager's mount namespace: %w", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the manager's mount namespace %s: %w", target, err)
	}
	return nil
}

// unmountStale unmounts, once, the mount at staging that a failed start left there (forced and
// lazy, as umount -f -l does, without following a link at staging).
func unmountStale(staging string) error {
	if err := unix.Unmount(staging, unix.MNT_FORCE|unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
		return fmt.Errorf("unmount %s: %w", staging, err)
	}
	return nil
}
