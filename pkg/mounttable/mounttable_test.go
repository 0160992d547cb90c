package mounttable

import (
	"os"
	"path/filepath"
	"testing"
)

// A mountinfo excerpt: a mount-s3 mount over the guard, a bind of a shared mount-s3 mount, a
// tmpfs that is not the guard, a FUSE mount of another daemon, and a path with an escaped space.
const mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
100 22 0:50 / /var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount ro,nosuid,nodev,noexec shared:2 - tmpfs s3csi-guard ro,size=4k,nr_inodes=2,mode=555
101 100 0:51 / /var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount rw,nosuid,nodev shared:3 - fuse mountpoint-s3 rw,user_id=0,group_id=0
102 22 0:52 / /var/lib/kubelet/plugins/s3.csi.scality.com/mnt/mp-1 rw shared:4 - fuse mountpoint-s3 rw,user_id=0,group_id=0
103 22 0:52 / /var/lib/kubelet/pods/p2/volumes/kubernetes.io~csi/pv/mount rw shared:4 - fuse mountpoint-s3 rw,user_id=0,group_id=0
104 22 0:53 / /tmp/other rw - tmpfs tmpfs rw
105 22 0:54 / /mnt/sshfs rw - fuse.sshfs user@host: rw
106 22 0:55 / /mnt/with\040space rw - fuse.mountpoint-s3 mountpoint-s3 rw
`

func TestTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := Table{Path: path}.List()
	if err != nil || len(entries) != 8 {
		t.Fatalf("List = %d entries, %v; want 8", len(entries), err)
	}
	var s3, guards []string
	for i := range entries {
		e := &entries[i]
		if IsMountS3(e) {
			s3 = append(s3, e.MountPoint)
		}
		if IsGuard(e) {
			guards = append(guards, e.MountPoint)
		}
	}
	wantS3 := []string{"/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount", "/var/lib/kubelet/plugins/s3.csi.scality.com/mnt/mp-1",
		"/var/lib/kubelet/pods/p2/volumes/kubernetes.io~csi/pv/mount", "/mnt/with space"}
	if len(s3) != len(wantS3) {
		t.Fatalf("mount-s3 mounts %q, want %q", s3, wantS3)
	}
	for i := range wantS3 {
		if s3[i] != wantS3[i] {
			t.Errorf("mount-s3 mount %d = %q, want %q", i, s3[i], wantS3[i])
		}
	}
	if len(guards) != 1 || guards[0] != "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv/mount" {
		t.Errorf("guards %q, want the one under p1", guards)
	}
	if IsMountS3(nil) || IsGuard(nil) {
		t.Error("nil entries count as mounts")
	}
	if _, err := (Table{Path: filepath.Join(t.TempDir(), "missing")}).List(); err == nil {
		t.Error("List of a missing table succeeded")
	}
}
