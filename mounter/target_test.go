package mounter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareTarget(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	mk := func(name string, make func(p string) error) string {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := mk("link", func(p string) error { return os.Symlink(outside, p) })
	dangling := mk("dangling", func(p string) error { return os.Symlink(filepath.Join(outside, "nope"), p) })
	file := mk("file", func(p string) error { return os.WriteFile(p, nil, 0o644) })
	existing := mk("existing", func(p string) error { return os.Mkdir(p, 0o755) })
	fifo := mk("fifo", func(p string) error { return mkfifo(p) })

	for _, tc := range []struct {
		name        string
		target      string
		wantCreated bool
		wantErr     string // "" = success
	}{
		{"absent is created", filepath.Join(dir, "new"), true, ""},
		{"existing directory", existing, false, ""},
		{"symlink to a directory", link, false, "is a symbolic link"},
		{"dangling symlink", dangling, false, "is a symbolic link"},
		{"regular file", file, false, "is not a directory"},
		{"fifo", fifo, false, "is not a directory"},
		{"parent is a symlink", filepath.Join(link, "x"), false, "parent of target"},
		{"parent missing", filepath.Join(dir, "nope", "mount"), false, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created, err := PrepareTarget(tc.target)
			if tc.wantErr == "" {
				if err != nil || created != tc.wantCreated {
					t.Fatalf("PrepareTarget = %v, %v; want %v, nil", created, err, tc.wantCreated)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.target) {
				t.Fatalf("PrepareTarget = %v; want an error naming the target with %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("error %v does not wrap ErrInvalidRequest", err)
			}
		})
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was created through a link: %v", entries)
	}
}
