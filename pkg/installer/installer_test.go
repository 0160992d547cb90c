package installer

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestInstall(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "opt", "bin")
	must(t, os.WriteFile(filepath.Join(src, "mount-s3"), []byte("#!/bin/sh\necho new\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "libfuse.so.2.9.9"), []byte("lib"), 0o644))
	must(t, os.Symlink("libfuse.so.2.9.9", filepath.Join(src, "libfuse.so.2")))
	must(t, os.Mkdir(filepath.Join(src, "subdir"), 0o755))
	must(t, os.MkdirAll(dst, 0o755))
	must(t, os.WriteFile(filepath.Join(dst, ".mount-s3"+tmpMarker+"123"), []byte("stale"), 0o644))

	names, err := Install(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"libfuse.so.2", "libfuse.so.2.9.9", "mount-s3"}; !slices.Equal(names, want) {
		t.Errorf("installed %v, want %v", names, want)
	}
	entries, _ := os.ReadDir(dst)
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			t.Errorf("leftover temporary file %s", e.Name())
		}
		st, _ := os.Lstat(filepath.Join(dst, e.Name()))
		if !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode = %v, want a regular 0755 file", e.Name(), st.Mode())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "libfuse.so.2")); string(b) != "lib" {
		t.Errorf("symlink not copied as its target: %q", b)
	}
}

// TestInstallKeepsRunningBinary replaces mount-s3 while a process runs from the old file: the
// process keeps its inode, the new file is complete.
func TestInstallKeepsRunningBinary(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dst, "mount-s3"), sleep, 0o755))
	cmd := exec.Command(filepath.Join(dst, "mount-s3"), "30")
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	oldIno := inode(t, filepath.Join(dst, "mount-s3"))

	newContent := bytes.Repeat([]byte("x"), 1<<20)
	must(t, os.WriteFile(filepath.Join(src, "mount-s3"), newContent, 0o644))
	if _, err := Install(src, dst); err != nil {
		t.Fatalf("Install over a running binary: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "mount-s3")); !bytes.Equal(got, newContent) {
		t.Error("new binary incomplete")
	}
	if inode(t, filepath.Join(dst, "mount-s3")) == oldIno {
		t.Error("file replaced in place instead of renamed over")
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("running process disturbed: %v", err)
	}
}

func TestInstallFailureLeavesNoTemp(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "mount-s3"), []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(dst, "mount-s3"), 0o755)) // a directory where the file goes
	must(t, os.WriteFile(filepath.Join(dst, "mount-s3", "keep"), nil, 0o644))
	if _, err := Install(src, dst); err == nil {
		t.Fatal("Install succeeded over a non-empty directory")
	}
	entries, _ := os.ReadDir(dst)
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			t.Errorf("temporary file left after failure: %s", e.Name())
		}
	}
	if _, err := Install(t.TempDir(), dst); err == nil || !strings.Contains(err.Error(), "no files") {
		t.Errorf("empty source: err = %v", err)
	}
}

func inode(t *testing.T, p string) uint64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
