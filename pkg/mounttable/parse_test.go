package mounttable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/mount-utils"
)

// TestParseAgreesWithMountUtils: every entry of this machine's own table, and of the excerpt,
// reads as k8s.io/mount-utils reads it (paths unescaped, which mount-utils leaves to callers).
func TestParseAgreesWithMountUtils(t *testing.T) {
	excerpt := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(excerpt, []byte(mountinfo+"107 22 0:56 /sub\\134dir /mnt/a\\011b rw,nosuid master:7 shared:8 - fuse.x weird\\040source rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/proc/self/mountinfo", excerpt} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := parse(string(data))
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := mount.ParseMountInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		// /proc/self/mountinfo may change between the two reads (other tests mount).
		if path == excerpt && len(ours) != len(theirs) || len(ours) == 0 {
			t.Fatalf("%s: %d entries, mount-utils %d", path, len(ours), len(theirs))
		}
		for i := 0; i < min(len(ours), len(theirs)); i++ {
			o, m := ours[i], theirs[i]
			if o.ID != m.ID {
				break // the table changed between the reads
			}
			if o.ParentID != m.ParentID || o.Major != m.Major || o.Minor != m.Minor || o.Root != unescape(m.Root) || o.MountPoint != unescape(m.MountPoint) ||
				o.FsType != m.FsType || o.Source != unescape(m.Source) || o.MountOptions != strings.Join(m.MountOptions, ",") || o.SuperOptions != strings.Join(m.SuperOptions, ",") {
				t.Errorf("%s entry %d:\n ours   %+v\n theirs %+v", path, i, o, m)
			}
		}
	}
	for _, bad := range []string{"1 2 3:4 / /x rw ext4 /dev/x rw", "1 2 3:4 / /x", "a 2 3:4 / /x rw - ext4 /dev/x rw", "1 2 34 / /x rw - ext4 /dev/x rw", "1 2 3:4 / /x rw - ext4"} {
		if _, err := parse(bad + "\n"); err == nil {
			t.Errorf("parse(%q) accepted a malformed line", bad)
		}
	}
}
