package confined

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzNames: whatever name a Mountpoint Pod could make the node plugin use (and whatever links
// it planted), reads and writes through a Dir never reach outside it and reads never return
// more than the cap.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"mount.err", "../outside/secret", "link/secret", "/etc/passwd", "a/../../b", ".", "", "link", "fifo", "credentials/config"} {
		f.Add(s, []byte("data"))
	}
	dir, outside := hostileFuzzDirs(f)
	before := listAll(f, outside)
	d, err := Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		if b, _, err := d.ReadFile(name, 64); err == nil && len(b) > 64 {
			t.Fatalf("ReadFile(%q) returned %d bytes, more than the cap", name, len(b))
		}
		_ = d.WriteFile(name, data, 0o600, -1)
		_ = d.Remove(name)
		if after := listAll(t, outside); !slices.Equal(after, before) {
			t.Fatalf("name %q changed the outside directory: %v → %v", name, before, after)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
			t.Fatalf("name %q changed the outside file: %q", name, b)
		}
	})
}

func hostileFuzzDirs(f *testing.F) (dir, outside string) {
	dir, outside = f.TempDir(), f.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		f.Fatal(err)
	}
	for name, to := range map[string]string{"link": outside, "secretlink": filepath.Join(outside, "secret"), "up": "../../../../"} {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "credentials"), 0o700); err != nil {
		f.Fatal(err)
	}
	return dir, outside
}

func listAll(t testing.TB, dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}
