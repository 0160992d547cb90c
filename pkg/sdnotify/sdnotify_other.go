//go:build !linux

package sdnotify

import (
	"errors"
	"time"
)

// ErrNoSocket is returned when $NOTIFY_SOCKET is not set.
var ErrNoSocket = errors.New("NOTIFY_SOCKET is not set")

// StoreFD is Linux's.
func StoreFD(string, string, int, time.Duration) error {
	return errors.New("systemd's descriptor store is reached on Linux only")
}
