// Package installer copies mount-s3 and its bundled libraries from the driver image to the
// host, for the systemd mount mode (the install-mp init container).
package installer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// tmpMarker is part of every temporary file name, so leftovers of an interrupted run can be
// recognised and removed.
const tmpMarker = ".tmp-install-"

// Install copies every regular file (or symlink to one, copied as the file it points to) of
// srcDir into dstDir, non-recursively. Each file is written to a temporary file in dstDir,
// made 0755, synced and renamed over its final name, so a mount-s3 that is running from the old
// file keeps its inode and is never disturbed, and a reader never sees a partial file.
// Temporary files are removed when a copy fails, and leftovers from an earlier interrupted run
// are removed first. It returns the names installed.
func Install(srcDir, dstDir string) ([]string, error) {
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		return nil, fmt.Errorf("read source directory: %w", err)
	}
	if err := os.MkdirAll(dstDir, 0o755); err != nil { //nolint:gosec // G301: a bin directory on the host, like /usr/local/bin
		return nil, fmt.Errorf("create install directory: %w", err)
	}
	if err := removeLeftovers(dstDir); err != nil {
		return nil, err
	}
	var installed []string
	for _, e := range entries {
		src := filepath.Join(srcDir, e.Name())
		st, err := os.Stat(src) // follows symlinks
		if err != nil {
			return installed, fmt.Errorf("stat %s: %w", src, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if err := copyAtomic(src, filepath.Join(dstDir, e.Name())); err != nil {
			return installed, err
		}
		installed = append(installed, e.Name())
	}
	if len(installed) == 0 {
		return nil, fmt.Errorf("no files to install in %s", srcDir)
	}
	return installed, nil
}

func removeLeftovers(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read install directory: %w", err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove leftover %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

func copyAtomic(src, dst string) (err error) {
	in, err := os.Open(src) //nolint:gosec // G304: a file of the image's --source directory
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+tmpMarker+"*")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", dst, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err = tmp.Chmod(0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("rename into %s: %w", dst, err)
	}
	return nil
}
