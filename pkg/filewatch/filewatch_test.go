package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func expect(t *testing.T, w *Watch, want bool, what string) {
	t.Helper()
	wait := 2 * time.Second
	if !want {
		wait = 200 * time.Millisecond
	}
	select {
	case <-w.Changed():
		if !want {
			t.Fatalf("%s: signalled", what)
		}
	case <-time.After(wait):
		if want {
			t.Fatalf("%s: not signalled", what)
		}
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	w, err := New(dir, "mount.err")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, w, false, "another file written")
	tmp := filepath.Join(dir, ".mount.err.tmp")
	if err := os.WriteFile(tmp, []byte("mount-s3 said no"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, w, false, "a temporary file written")
	if err := os.Rename(tmp, filepath.Join(dir, "mount.err")); err != nil {
		t.Fatal(err)
	}
	expect(t, w, true, "renamed into place")
	if err := os.WriteFile(filepath.Join(dir, "mount.err"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, w, true, "written in place")
	w.Close()
	w.Close() // twice is fine
}

func TestWatchMissingDir(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "none"), "x"); err == nil {
		t.Fatal("watching a missing directory succeeded")
	}
}
