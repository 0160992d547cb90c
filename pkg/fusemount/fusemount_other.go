//go:build !linux

package fusemount

import (
	"errors"
	"os"
)

// Mount is Linux's.
func Mount(string, bool, bool) (*os.File, error) {
	return nil, errors.New("FUSE mounts are made on Linux only")
}

// RemountReadOnly is Linux's.
func RemountReadOnly(string) error {
	return errors.New("FUSE mounts are made on Linux only")
}
