// Package guest holds the checks of the VM rig (tests/vm) that run inside its guest, against
// the guest's PID 1 (systemd, unified cgroup v2 hierarchy) over /run/systemd/private as the
// chart's node plugin reaches the node's systemd. tests/vm compiles this package with
// `go test -c`, puts the binary on the guest's binaries disk with the project's binaries and
// runs one test per host test through the guest agent.
//
// Outside the guest (GuestEnv unset) every test is skipped by TestMain: these checks need a
// machine whose PID 1 the tests may drive, and `make test-vm` is the way to run them.
package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// GuestEnv is set (to "1") by the VM rig for the test binary it runs in the guest.
const GuestEnv = "S3CSI_VM_GUEST"

// pid1Socket is PID 1's private D-Bus socket, the node plugin's default --systemd-socket.
const pid1Socket = "/run/systemd/private"

// allocEnv makes the test binary a memory hog (TestMain): it allocates and touches that many
// MiB, then sleeps. TestMemoryMaxKillsUnit runs it as a transient unit.
const allocEnv = "S3CSI_VM_ALLOCATE_MIB"

func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) == "1" {
		spin()
	}
	if mib := os.Getenv(allocEnv); mib != "" {
		allocate(mib)
		return
	}
	if os.Getenv(GuestEnv) != "1" {
		fmt.Println("skipping: these tests run inside the VM rig's guest (make test-vm)")
		return
	}
	os.Exit(m.Run())
}

// allocate touches n MiB a page at a time and keeps it (the unit's MemoryMax ends it first).
func allocate(n string) {
	var mib int
	if _, err := fmt.Sscan(n, &mib); err != nil {
		os.Exit(2)
	}
	var keep [][]byte
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	fmt.Printf("allocated %d MiB\n", len(keep))
	time.Sleep(time.Hour)
}

func connect(t *testing.T) *sd.Conn {
	t.Helper()
	c, err := systemd.Connect(pid1Socket)
	if err != nil {
		t.Fatalf("PID 1's private socket: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestPID1IsSystemdOnCgroup2 shows the guest is what the rig promises: systemd is PID 1 and
// answers on its private socket, /sys/fs/cgroup is the unified hierarchy with the memory
// controller available and enabled for the units' slices.
func TestPID1IsSystemdOnCgroup2(t *testing.T) {
	comm, err := os.ReadFile("/proc/1/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("PID 1 is %q (%v), want systemd", comm, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatalf("/sys/fs/cgroup has file system magic %#x, want cgroup2 (%#x)", fs.Type, unix.CGROUP2_SUPER_MAGIC)
	}
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " memory ") {
			t.Errorf("/sys/fs/cgroup/%s = %q: no memory controller", f, strings.TrimSpace(string(b)))
		}
	}
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := c.GetManagerProperty("Virtualization")
	if err != nil {
		t.Fatalf("manager property Virtualization over %s: %v", pid1Socket, err)
	}
	if !strings.Contains(v, "qemu") && !strings.Contains(v, "kvm") {
		t.Errorf("Virtualization = %s: not a qemu guest", v)
	}
	// Each unit's memory settings land in its own cgroup: system.slice has the controller.
	b, err := os.ReadFile("/sys/fs/cgroup/system.slice/cgroup.controllers")
	if err != nil || !strings.Contains(string(b), "memory") {
		t.Errorf("system.slice controllers %q (%v): no memory", b, err)
	}
	if _, err := c.ListUnitsByNamesContext(ctx, []string{"init.scope"}); err != nil {
		t.Errorf("ListUnitsByNames over %s: %v", pid1Socket, err)
	}
}

// unitProp reads one property of a service unit's Service interface.
func unitProp(t *testing.T, c *sd.Conn, unit, prop string) string {
	t.Helper()
	p, err := c.GetServicePropertyContext(context.Background(), unit, prop)
	if err != nil {
		t.Fatalf("%s %s: %v", unit, prop, err)
	}
	return strings.Trim(p.Value.String(), `"`)
}

// TestMemoryMaxKillsUnit shows PID 1 enforces a transient unit's MemoryMax: a process
// allocating 200 MiB under MemoryMax=64M (no swap) is OOM-killed by the kernel and the unit
// ends with Result=oom-kill, as a mount-s3 unit past its mountpointMemoryLimit would.
func TestMemoryMaxKillsUnit(t *testing.T) {
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	unit := fmt.Sprintf("s3csi-vm-oom-%d.service", time.Now().UnixNano())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	props := []sd.Property{
		sd.PropDescription("VM rig: memory hog under MemoryMax"),
		sd.PropExecStart([]string{self}, false),
		{Name: "Environment", Value: dbus.MakeVariant([]string{allocEnv + "=200"})},
		{Name: "MemoryMax", Value: dbus.MakeVariant(uint64(64 << 20))},
		{Name: "MemorySwapMax", Value: dbus.MakeVariant(uint64(0))},
	}
	done := make(chan string, 1)
	if _, err := c.StartTransientUnitContext(ctx, unit, "replace", props, done); err != nil {
		t.Fatalf("start %s: %v", unit, err)
	}
	t.Cleanup(func() { _, _ = c.StopUnitContext(context.Background(), unit, "replace", nil) })
	if r := <-done; r != "done" {
		t.Fatalf("start job of %s: %s", unit, r)
	}
	// The default CollectMode (inactive) keeps the failed unit loaded until it is reset, so its
	// result stays readable. (inactive-or-failed unloads it at once: its properties then read as
	// a fresh unit's, Result=success, and the kill is missed.)
	t.Cleanup(func() { _ = c.ResetFailedUnitContext(context.Background(), unit) })
	for {
		if r := unitProp(t, c, unit, "Result"); r != "success" {
			if r != "oom-kill" {
				t.Fatalf("%s ended with Result=%s, want oom-kill", unit, r)
			}
			t.Logf("%s: Result=%s", unit, r)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not OOM-killed within the deadline (MemoryMax not enforced?): ActiveState=%s MainPID=%s\n%s",
				unit, unitProp(t, c, unit, "ActiveState"), unitProp(t, c, unit, "MainPID"), journalOf(t, unit))
		}
		time.Sleep(200 * time.Millisecond)
	}
	journal := journalOf(t, unit)
	if !strings.Contains(journal, "oom") && !strings.Contains(journal, "OOM") {
		t.Errorf("journal of %s does not mention the OOM kill:\n%s", unit, journal)
	}
}

// journalOf returns the unit's journal (messages only), syncing journald first.
func journalOf(t *testing.T, unit string) string {
	t.Helper()
	return journal(t, "-u", unit)
}

// journal runs journalctl with the matches given (messages only), syncing journald first.
func journal(t *testing.T, matches ...string) string {
	t.Helper()
	_ = exec.Command("journalctl", "--sync").Run()
	out, err := exec.Command("journalctl", append([]string{"--no-pager", "-o", "cat"}, matches...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl %s: %v\n%s", strings.Join(matches, " "), err, out)
	}
	return string(out)
}

// TestPublishThroughPID1 runs the node plugin in systemd mode against PID 1 (its default
// socket, as root) with versitygw on the guest's loopback: NodePublishVolume starts mount-s3
// as a transient unit of PID 1 in s3csi.slice, with the volume's memory limit as the unit's
// MemoryMax in its cgroup; data written through the mount reaches the bucket; mount-s3's log
// is in the unit's journal (docs/logging.md); NodeUnpublishVolume unmounts and the unit goes.
//
// The unit's confinement is checked where it takes effect, on the running mount-s3 (what PID 1
// applied, not what was asked): no capability in any set, no_new_privs, a seccomp filter, the
// driver's own user in every uid; its credential files (the chart's directory) on a tmpfs, 0750
// and 0640, root's and that user's group, and the secret in no file below the kubelet directory
// or the cache directory (the node's disk); after unpublish, neither its credentials nor its
// cache are left.
func TestPublishThroughPID1(t *testing.T) {
	s3, kubelet, drv := startNode(t, "vm-bucket", "--systemd-credentials-dir="+chartCredentialsDir, "--systemd-cache-dir="+chartCacheDir)
	target := harness.TargetPath(t, kubelet, "pod-vm", "pv-vm")
	limit := mountresources.MinMemoryLimit
	req := publishRequest(target, "vm-bucket", "vol-vm-bucket")
	req.VolumeContext[mountresources.AttrMemoryLimit] = limit.String()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	// The hand-over stacks the helper's FUSE mount and the bind onto the target: one or more.
	if m := harness.MountsBelow(target); len(m) == 0 {
		t.Fatalf("nothing mounted at %s after NodePublishVolume", target)
	}
	body := []byte("written in the guest through a unit of PID 1\n")
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), body, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got := s3.GetObject(t, "vm-bucket", "hello.txt"); !bytes.Equal(got, body) {
		t.Fatalf("object hello.txt = %q, want %q", got, body)
	}

	c := connect(t)
	unit := systemd.MountUnitName(target)
	if st := unitProp(t, c, unit, "ControlGroup"); !strings.HasPrefix(st, "/"+systemd.Slice+"/") {
		t.Errorf("%s runs in cgroup %s, want one below %s", unit, st, systemd.Slice)
	} else {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", st, "memory.max"))
		if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(limit.Value()) {
			t.Errorf("%s memory.max = %q (%v), want %d (the volume's %s limit)", unit, bytes.TrimSpace(b), err, limit.Value(), limit.String())
		}
	}
	// mount-s3's own lines (syslog identifier mount-s3), not systemd's Starting/Started ones, in
	// both places docs/logging.md names.
	for _, args := range [][]string{{"-u", unit, "-t", "mount-s3"}, {"-t", "mount-s3"}} {
		j := journal(t, args...)
		if !strings.Contains(j, "vm-bucket") {
			t.Errorf("journalctl %s has no line of mount-s3 about its bucket:\n%s", strings.Join(args, " "), j)
		}
	}
	t.Logf("journalctl -u %s:\n%s", unit, journalOf(t, unit))
	id := strings.TrimSuffix(strings.TrimPrefix(unit, "mount-s3-"), ".service")
	checkConfined(t, (&pid1{t: t}).mainPID(unit))
	creds := filepath.Join(chartCredentialsDir, id)
	checkCredentialFiles(t, creds)
	for _, dir := range []string{kubelet, chartCacheDir} {
		if f := fileHolding(t, dir, s3.SecretKey); f != "" {
			t.Errorf("the secret key is in %s, on the node's disk", f)
		}
	}

	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if m := harness.MountsBelow(target); len(m) != 0 {
		t.Errorf("still mounted after unpublish: %v", m)
	}
	units, err := c.ListUnitsByPatternsContext(ctx, nil, []string{strings.TrimSuffix(unit, ".service") + "*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if u.ActiveState != "inactive" {
			t.Errorf("unit %s left %s after unpublish", u.Name, u.ActiveState)
		}
	}
	for _, p := range []string{creds, filepath.Join(chartCacheDir, id)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left after unpublish (%v)", p, err)
		}
	}
}

// publishRequest is kubelet's NodePublishVolume of a read-write static volume of bucket.
func publishRequest(target, bucket, volumeID string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   volumeID,
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": bucket},
	}
}
