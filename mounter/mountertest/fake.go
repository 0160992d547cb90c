// Package mountertest provides Fake, an in-memory mounter.Mounter for unit tests of code that
// mounts through the interface (the node server). It keeps the interface's contract: Mount is
// idempotent for the same volume, Unmount of an unknown target succeeds.
package mountertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// Fake records mounts in memory. The zero value is ready to use; it is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	mounted map[string]mounter.Request
	calls   []string

	// MountHook, when set, runs at the start of Mount; a non-nil error is returned as is.
	MountHook func(ctx context.Context, req mounter.Request) error
	// UnmountHook, when set, runs at the start of Unmount; a non-nil error is returned as is.
	UnmountHook func(ctx context.Context, target string) error
}

var _ mounter.Mounter = (*Fake)(nil)

// Mount records req at req.Target. A different volume already there is ErrTargetInUse.
func (f *Fake) Mount(ctx context.Context, req mounter.Request) error {
	if f.MountHook != nil {
		if err := f.MountHook(ctx, req); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "mount "+req.Target)
	if old, ok := f.mounted[req.Target]; ok && old.VolumeID != req.VolumeID {
		return fmt.Errorf("%w: holds %s", mounter.ErrTargetInUse, old.VolumeID)
	}
	if f.mounted == nil {
		f.mounted = map[string]mounter.Request{}
	}
	f.mounted[req.Target] = req
	return nil
}

// Unmount forgets target.
func (f *Fake) Unmount(ctx context.Context, target string) error {
	if f.UnmountHook != nil {
		if err := f.UnmountHook(ctx, target); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unmount "+target)
	delete(f.mounted, target)
	return nil
}

// Mounted returns the request mounted at target, if any.
func (f *Fake) Mounted(target string) (mounter.Request, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.mounted[target]
	return r, ok
}

// Calls returns the operations performed so far ("mount <target>", "unmount <target>").
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
