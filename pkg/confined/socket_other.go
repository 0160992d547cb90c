//go:build !linux

package confined

import "errors"

// SocketPath needs Linux's O_PATH descriptors and /proc/self/fd; elsewhere it fails.
func (d *Dir) SocketPath(name string) (path string, release func(), err error) {
	return "", nil, errors.New("confined socket paths need Linux (O_PATH, /proc/self/fd)")
}
