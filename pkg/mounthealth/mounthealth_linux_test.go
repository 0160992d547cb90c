package mounthealth

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestLookupFromTheKernel: where the kernel can say (the machine's own table, Linux 6.13), each
// answer of a lookup is the kernel's of the moment: a tmpfs mounted between two questions is seen.
func TestLookupFromTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to mount (make test runs as root)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	live := &Checker{}
	look := live.Lookup()
	if r, err := look.Check(ctx, dir); err != nil || r.State != Absent {
		t.Fatalf("before the mount: %v, %v; want Absent", r.State, err)
	}
	if err := syscall.Mount("s3csi-lookup", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()
	r, err := look.Check(ctx, dir)
	if err != nil || r.State != Foreign || r.Entry == nil || r.Entry.Source != "s3csi-lookup" {
		t.Errorf("after the mount: %+v, %v; want Foreign, the tmpfs", r, err)
	}
}
