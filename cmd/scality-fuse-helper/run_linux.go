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
