// Package confined is how the node plugin (root) touches files in a directory that a less
// trusted party can write: a Mountpoint Pod's comm directory (uid 1000). Every access goes
// through an *os.Root opened on that directory, so no name, symbolic link or ".." can reach
// a file outside it; the last component is never followed; files are replaced by a rename
// inside the directory, never written in place (which a hard link could redirect); reads are
// capped and refuse anything but a regular file (a FIFO would block, a device would be read).
package confined

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrFileType is wrapped when a name is not the kind of file expected (a regular file, a
// directory for Sub, a socket for SocketPath): a symbolic link, a FIFO, a device, ...
var ErrFileType = errors.New("unexpected file type")

// Dir is an opened directory that someone else can write.
type Dir struct {
	root *os.Root
}

// Open opens dir. The directory itself must not be a symbolic link (its own path is trusted:
// the node plugin derives it from kubelet's layout).
func Open(dir string) (*Dir, error) {
	if st, err := os.Lstat(dir); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s: %w (a directory is required)", dir, ErrFileType)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Dir{root: r}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Name is the directory's path (for messages).
func (d *Dir) Name() string { return d.root.Name() }

// HasFile reports whether name (a slash-separated path below d) is a regular file, without
// following a link at any component.
func (d *Dir) HasFile(name string) bool {
	st, err := d.root.Lstat(name)
	return err == nil && st.Mode().IsRegular()
}

// Sub opens the subdirectory name, creating it with perm when missing, and sets its owner
// (uid 0, group gid unless gid < 0) and mode on the opened directory itself. A name that is a
// symbolic link or not a directory is refused.
func (d *Dir) Sub(name string, perm os.FileMode, gid int) (*Dir, error) {
	if err := d.root.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	st, err := d.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s/%s: %w (a directory is required, found %s)", d.Name(), name, ErrFileType, st.Mode().Type())
	}
	f, err := d.root.OpenFile(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if gid >= 0 {
		if err := f.Chown(0, gid); err != nil {
			return nil, err
		}
	}
	if err := f.Chmod(perm); err != nil {
		return nil, err
	}
	sub, err := d.root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	return &Dir{root: sub}, nil
}

// WriteFile replaces name with data: a new file (O_EXCL, mode perm, owned by uid 0 and group
// gid unless gid < 0) is written under a random temporary name and renamed over name, so a
// reader never sees half a file and nothing already at name (a link, a FIFO) is written through.
// It does not fsync (callers rewrite the files after a node crash).
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode, gid int) (err error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + filepath.Base(name) + ".tmp-" + hex.EncodeToString(rnd[:])
	if dir := filepath.Dir(name); dir != "." {
		tmp = filepath.Join(dir, tmp)
	}
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = d.root.Remove(tmp)
		}
	}()
	if gid >= 0 {
		if err = f.Chown(0, gid); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = d.root.Rename(tmp, name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// ReadFile reads at most max bytes of the regular file name and reports whether there was
// more. It opens without following a link and without blocking (a FIFO), and refuses
// anything that is not a regular file.
func (d *Dir) ReadFile(name string, max int64) (data []byte, truncated bool, err error) {
	f, err := d.root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, false, fmt.Errorf("%s/%s: %w (a symbolic link)", d.Name(), name, ErrFileType)
		}
		return nil, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !st.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s/%s: %w (%s)", d.Name(), name, ErrFileType, st.Mode().Type())
	}
	data, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > max {
		return data[:max], true, nil
	}
	return data, false, nil
}

// Remove removes name (a file, a link, an empty directory); a missing name is not an error.
func (d *Dir) Remove(name string) error {
	if err := d.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveAll removes name and everything below it, without following links out of d.
func (d *Dir) RemoveAll(name string) error { return d.root.RemoveAll(name) }
