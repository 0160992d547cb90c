package mounter

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// PrepareTarget makes sure target can take a mount: it creates the directory (mode 0755) when
// it does not exist and reports created = true, so a failed mount can remove it again. An
// existing target must be a directory (see CheckTarget).
func PrepareTarget(target string) (created bool, err error) {
	parent, err := openParent(target)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: the parent directory of target %s does not exist (kubelet creates it before publishing)", ErrInvalidRequest, target)
	}
	if err != nil {
		return false, err
	}
	defer parent.Close()
	err = unix.Mkdirat(int(parent.Fd()), filepath.Base(target), 0o755)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("create target directory %s: %w", target, err)
	}
	return false, checkEntry(parent, target)
}

// CheckTarget returns nil when target does not exist or is a directory, and ErrInvalidRequest
// naming target_path when it is a symbolic link (which would carry a mount wherever it points,
// outside kubelet's directory) or any other kind of file. It reads the entry's type from the
// parent directory's listing, never following the last component: a mount on target (whose
// FUSE daemon may hang) is not touched, nor is what a link points to.
func CheckTarget(target string) error {
	parent, err := openParent(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer parent.Close()
	return checkEntry(parent, target)
}

// checkEntry applies CheckTarget's rule to target's entry in its opened parent directory.
func checkEntry(parent *os.File, target string) error {
	typ, err := entryType(parent, filepath.Base(target))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("inspect target %s: %w", target, err)
	case typ&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: target %s is a symbolic link; the driver mounts only on a directory", ErrInvalidRequest, target)
	case !typ.IsDir():
		return fmt.Errorf("%w: target %s is not a directory", ErrInvalidRequest, target)
	}
	return nil
}

// openParent opens target's parent directory, refusing a symbolic link as the parent's own
// last component (targetpath.Parse has checked that the parent resolves below kubelet's pods
// directory).
func openParent(target string) (*os.File, error) {
	dir := filepath.Dir(target)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("%w: the parent of target %s is a symbolic link or not a directory", ErrInvalidRequest, target)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// entryType returns the type bits of name's entry in the directory listing of dir (d_type):
// neither a mount on the entry nor a link's destination is touched.
func entryType(dir *os.File, name string) (fs.FileMode, error) {
	for {
		entries, err := dir.ReadDir(256)
		for _, e := range entries {
			if e.Name() == name {
				return e.Type(), nil
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(entries) == 0) {
			return 0, fs.ErrNotExist
		}
		if err != nil {
			return 0, err
		}
	}
}
