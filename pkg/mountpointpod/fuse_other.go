//go:build !linux

package mountpointpod

import (
	"errors"
	"os"
	"syscall"
)

// checkFUSE refuses everything: serving a handed-over FUSE descriptor needs Linux.
func checkFUSE(*os.File) error { return errors.New("the Mountpoint Pod runs on Linux only") }

func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
