package mounttable

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMounted: /proc is a mount point, a directory in a temporary directory and a missing
// path are not, a link to /proc is not followed; a test's own table cannot tell.
func TestMounted(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/proc", link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		mounted bool
	}{
		{"/proc", true},
		{sub, false},
		{filepath.Join(dir, "missing"), false},
		{filepath.Join(dir, "missing", "deeper"), false},
		{link, false},
	} {
		mounted, known := Table{}.Mounted(tc.path)
		if !known || mounted != tc.mounted {
			t.Errorf("Mounted(%s) = %v, %v; want %v, true", tc.path, mounted, known, tc.mounted)
		}
	}
	if _, known := (Table{}).Mounted("/"); known {
		t.Error("Mounted(/) claimed to know (it has no parent to compare with)")
	}
	if _, known := (Table{Path: "/tmp/mountinfo"}).Mounted("/proc"); known {
		t.Error("a table read from a file of its own claimed to know what is mounted")
	}
}
