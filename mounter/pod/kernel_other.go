//go:build !linux

package pod

import (
	"errors"
	"os"
)

// errLinuxOnly is what pod mode answers on other systems.
var errLinuxOnly = errors.New("pod mode runs on Linux only")

// hostKernel refuses everything: FUSE hand-over and bind mounts are Linux's.
type hostKernel struct{}

func (hostKernel) MountFUSE(string, bool, bool) (*os.File, error) { return nil, errLinuxOnly }
func (hostKernel) Bind(string, string, bool) error                { return errLinuxOnly }
func (hostKernel) Unmount(string, unmountHow) error               { return errLinuxOnly }
func (hostKernel) Answer(string) error                            { return errLinuxOnly }
