package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/fusemount"
	"github.com/s3csi/s3-csi-driver/pkg/sdnotify"
)

// run mounts FUSE at staging, makes the mount private and stores its descriptor with systemd;
// on any failure the mount is undone.
func run(staging string, readOnly, allowOther bool, timeout time.Duration) error {
	f, err := fusemount.Mount(staging, allowOther, readOnly)
	if err != nil {
		return err
	}
	defer f.Close() // systemd holds its own copy once stored
	err = unix.Mount("", staging, "", unix.MS_PRIVATE, "")
	if err == nil {
		err = sdnotify.StoreFD(os.Getenv("NOTIFY_SOCKET"), fdName, int(f.Fd()), timeout)
	}
	if err != nil {
		if uerr := unix.Unmount(staging, unix.MNT_DETACH); uerr != nil {
			return fmt.Errorf("%w (and the FUSE mount at %s could not be undone: %v)", err, staging, uerr)
		}
		return err
	}
	return nil
}

// sysMount is mount(2) (a test makes it fail).
var sysMount = unix.Mount

// bindTwice binds the mount at staging onto target twice, the second bind on top of the first,
// each made read-only when readOnly (fusemount.RemountReadOnly). target is opened as a
// directory without following a link at its last component, and each mount call names that
// open directory, so a link swapped in meanwhile is never followed. On a failure the binds made
// are unmounted again, leaving target as it was.
func bindTwice(staging, target string, readOnly bool) error {
	made := 0
	err := func() error {
		for range 2 {
			if err := fusemount.AtDir(target, func(at string) error { return sysMount(staging, at, "", unix.MS_BIND, "") }); err != nil {
				return fmt.Errorf("bind %s onto %s: %w", staging, target, err)
			}
			made++
			if readOnly {
				// Opened again: the path now leads to the new bind, which must turn read-only.
				if err := fusemount.AtDir(target, fusemount.RemountReadOnly); err != nil {
					return fmt.Errorf("make the bind at %s read-only: %w", target, err)
				}
			}
		}
		return nil
	}()
	if err == nil {
		return nil
	}
	for ; made > 0; made-- {
		if uerr := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); uerr != nil {
			return fmt.Errorf("%w (and a bind at %s could not be undone: %v)", err, target, uerr)
		}
	}
	return err
}
