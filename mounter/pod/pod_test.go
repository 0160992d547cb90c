package pod

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// A mountinfo excerpt: a shared FUSE mount (0:52) and two workload binds of it; another FUSE
// mount (0:53) seen again under /csi (a restarted node plugin's view of the plugin directory)
// and below itself, neither of which is a workload.
const mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
100 22 0:52 / /k/plugins/s3.csi.scality.com/mnt/mp-a rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
101 22 0:52 / /k/pods/w1/volumes/kubernetes.io~csi/pv/mount rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
102 22 0:52 / /k/pods/w2/volumes/kubernetes.io~csi/pv/mount ro,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
103 22 0:53 / /k/plugins/s3.csi.scality.com/mnt/mp-b rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
104 22 0:53 / /csi/mnt/mp-b rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
105 22 0:53 / /k/plugins/s3.csi.scality.com/mnt/mp-b/nested rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
`

func table(t *testing.T) mounttable.Table {
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return mounttable.Table{Path: p}
}

func TestBindsOf(t *testing.T) {
	tb := table(t)
	binds, err := bindsOf(tb, "/k/plugins/s3.csi.scality.com/mnt/mp-a", "/k/pods")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/k/pods/w1/volumes/kubernetes.io~csi/pv/mount", "/k/pods/w2/volumes/kubernetes.io~csi/pv/mount"}
	if !slices.Equal(binds, want) {
		t.Errorf("binds = %v, want %v", binds, want)
	}
	if binds, _ := bindsOf(tb, "/k/plugins/s3.csi.scality.com/mnt/mp-b", "/k/pods"); len(binds) != 0 {
		t.Errorf("unused source has binds %v (its /csi copy is not a workload)", binds)
	}
	if binds, _ := bindsOf(tb, "/not/mounted", "/k/pods"); binds != nil {
		t.Errorf("unmounted source has binds %v", binds)
	}
}

// TestSourceOf: a bind's Mountpoint Pod is found in the table, also when the target's record
// names another one (a record the kernel cannot confirm, as with this test's own table, is not
// trusted); the root is no bind.
func TestSourceOf(t *testing.T) {
	m := &Mounter{paths: paths{kubelet: "/k"}, health: &mounthealth.Checker{Table: table(t)}}
	entries, _ := m.health.Table.List()
	for _, e := range entries {
		if e.MountPoint == "/k/pods/w2/volumes/kubernetes.io~csi/pv/mount" {
			for _, recorded := range []string{"", "mp-a", "mp-b"} {
				if got := m.sourceOf(&e, recorded); got != "mp-a" {
					t.Errorf("sourceOf(bind, recorded %q) = %q, want mp-a", recorded, got)
				}
			}
		}
		if e.MountPoint == "/" {
			if got := m.sourceOf(&e, "mp-a"); got != "" {
				t.Errorf("sourceOf(root) = %q, want none", got)
			}
		}
	}
}

func TestWatchFile(t *testing.T) {
	dir := t.TempDir()
	w, err := watchFile(dir, "mount.err")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Unrelated files are ignored; an atomic rename of the watched name is reported with its content.
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp"), []byte("mount-s3 said no"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, ".tmp"), filepath.Join(dir, "mount.err")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.appeared:
		if got != "mount-s3 said no" {
			t.Errorf("content = %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rename not reported")
	}
	// A file that exists before the watch starts is reported at once.
	w2, err := watchFile(dir, "mount.err")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	select {
	case <-w2.appeared:
	case <-time.After(time.Second):
		t.Fatal("existing file not reported")
	}
}

func TestWithMargin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	short, c2 := withMargin(ctx, time.Second)
	defer c2()
	dl, _ := short.Deadline()
	if left := time.Until(dl); left > 9*time.Second+100*time.Millisecond || left < 8*time.Second {
		t.Errorf("deadline in %v, want about 9s", left)
	}
	none, c3 := withMargin(context.Background(), time.Second)
	defer c3()
	if _, ok := none.Deadline(); ok {
		t.Error("a context without deadline got one")
	}
}
