package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestUnitsConfined: the mount-s3 a publish starts runs confined (systemd.Sandbox) and its
// mount works: its process holds CAP_SYS_ADMIN only, in its bounding and effective sets, with
// no_new_privs and a seccomp filter; a write and a read through the mount reach the bucket.
// Then a unit with the same confinement running a shell shows each property refusing what it
// is for, next to a control the unit may do; and a probe shows the system call filter refusing
// each call it names, next to a unit without the filter where the same calls are made.
func TestUnitsConfined(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "confined")
	target := s.target("pod-a")
	s.publish(rw(target, "confined", "allow-delete"))
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through a confined mount-s3: %v", err)
	}
	if got := s.s3.GetObject(t, "confined", "hello.txt"); string(got) != "hi" {
		t.Errorf("object = %q", got)
	}
	out, err := s.sd.Systemctl("show", "--property=MainPID", "--value", systemd.MountUnitName(target))
	if err != nil {
		t.Fatalf("systemctl show: %v: %s", err, out)
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(out), "status"))
	if err != nil {
		t.Fatalf("mount-s3's status (main PID %q): %v", out, err)
	}
	// The descriptor hand-over (systemd 246 and later, as here): mount-s3 serves the connection
	// scality-fuse-helper mounted and holds no capability at all.
	const none = "0000000000000000"
	for _, want := range []string{"CapEff:\t" + none, "CapPrm:\t" + none, "CapBnd:\t" + none, "CapAmb:\t" + none, "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("mount-s3's /proc status lacks %q:\n%s", want, status)
		}
	}
	if cmdline, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(out), "cmdline")); err != nil || !strings.HasSuffix(string(cmdline), "\x00confined\x00/dev/fd/3\x00") {
		t.Errorf("mount-s3's command line %q (%v), want the bucket served from /dev/fd/3", cmdline, err)
	}
	// As a user of its own (--mount-s3-user, created in the manager's /etc when missing).
	uid, gid := s.sd.UserIDs(t, harness.MountS3User)
	if uid == 0 || gid == 0 {
		t.Fatalf("mount-s3's user has uid %d gid %d", uid, gid)
	}
	for _, want := range []string{fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", uid), fmt.Sprintf("Gid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", gid)} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("mount-s3's /proc status lacks %q:\n%s", want, status)
		}
	}
	if passwd, _ := os.ReadFile(filepath.Join(s.sd.EtcDir, "passwd")); !strings.Contains(string(passwd), harness.MountS3User+":x:") ||
		strings.Contains(string(mustRead(t, "/etc/passwd")), harness.MountS3User+":x:") {
		t.Errorf("the user must be created in the manager's /etc copy only")
	}
	s.unpublish(target)
	s.assertClean(target)

	// What that user may do, in a unit confined as a mount unit's mount-s3 is: write its own
	// cache; not write a root-owned file (as root without capabilities it could), not read
	// root's files, not read a directory of another user.
	userDir := t.TempDir()
	for _, d := range []string{filepath.Dir(userDir), userDir} { // as /var/cache and its parents are
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rootFile := filepath.Join(userDir, "root-file")
	secret := filepath.Join(userDir, "root-secret")
	if err := os.WriteFile(rootFile, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("root's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(userDir, "own-cache")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, uid, gid); err != nil {
		t.Fatal(err)
	}
	userScript := fmt.Sprintf(`try() { if "$@" 2>/dev/null; then echo "$name allowed"; else echo "$name refused"; fi; }
name=own-cache-write try sh -c 'echo x > %[1]s/block'
name=write-root-file try sh -c 'echo x >> %[2]s'
name=read-root-secret try cat %[3]s
name=create-in-root-dir try sh -c 'echo x > %[4]s/new'
`, own, rootFile, secret, userDir)
	userLog := filepath.Join(t.TempDir(), "out")
	{
		conn, err := systemd.Connect(s.sd.Socket)
		if err != nil {
			t.Fatal(err)
		}
		sandbox := systemd.Sandbox()
		for i := range sandbox {
			if sandbox[i].Name == "CapabilityBoundingSet" {
				sandbox[i].Value = dbus.MakeVariant(uint64(0))
			}
		}
		props := append([]sd.Property{
			sd.PropType("oneshot"),
			systemd.ExecProperty("ExecStart", []string{"/bin/sh", "-c", userScript}),
			{Name: "StandardOutputFile", Value: dbus.MakeVariant(userLog)},
			{Name: "StandardErrorFile", Value: dbus.MakeVariant(userLog)},
			{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
			{Name: "User", Value: dbus.MakeVariant(harness.MountS3User)},
			{Name: "Group", Value: dbus.MakeVariant(harness.MountS3User)},
		}, sandbox...)
		ch := make(chan string, 1)
		if _, err := conn.StartTransientUnitContext(context.Background(), "s3csi-user-probe.service", "fail", props, ch); err != nil {
			t.Fatalf("start the user probe unit: %v", err)
		}
		if res := <-ch; res != "done" {
			t.Fatalf("user probe unit: %s", res)
		}
		conn.Close()
	}
	gotUser := mustRead(t, userLog)
	for _, want := range []string{"own-cache-write allowed", "write-root-file refused", "read-root-secret refused", "create-in-root-dir refused"} {
		if !strings.Contains(string(gotUser), want+"\n") {
			t.Errorf("mount-s3's user: %q missing in:\n%s", want, gotUser)
		}
	}
	if b := mustRead(t, rootFile); string(b) != "root's" {
		t.Errorf("the root-owned file changed: %q", b)
	}

	// The same confinement around a shell: each line prints what happened.
	dir := t.TempDir()
	other := filepath.Join(dir, "other-users-file")
	if err := os.WriteFile(other, []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`cd %[1]s
try() { if "$@" 2>/dev/null; then echo "$name allowed"; else echo "$name refused"; fi; }
name=own-file-write try sh -c 'echo ok > own'
name=chown try chown 4242 own
name=write-other-users-file try sh -c 'echo x >> %[2]s'
name=new-namespace try unshare -m true
name=setuid-bit try chmod u+s own
name=tmpfs-mount try mount -t tmpfs -o size=4k t %[1]s
umount %[1]s 2>/dev/null
stat -c 'umask-file-mode %%a' own
`, dir, other)
	log := filepath.Join(dir, "out")
	conn, err := systemd.Connect(s.sd.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	props := append([]sd.Property{
		sd.PropType("oneshot"),
		systemd.ExecProperty("ExecStart", []string{"/bin/sh", "-c", script}),
		{Name: "StandardOutputFile", Value: dbus.MakeVariant(log)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}, systemd.Sandbox()...)
	ch := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(context.Background(), "s3csi-sandbox-probe.service", "fail", props, ch); err != nil {
		t.Fatalf("start the probe unit: %v", err)
	}
	if res := <-ch; res != "done" {
		t.Fatalf("probe unit: %s", res)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"own-file-write allowed",         // control: root may write its own files
		"tmpfs-mount allowed",            // CAP_SYS_ADMIN stays: mount-s3 and the binds need it
		"chown refused",                  // CAP_CHOWN dropped
		"write-other-users-file refused", // CAP_DAC_OVERRIDE dropped
		"new-namespace refused",          // RestrictNamespaces
		"setuid-bit refused",             // RestrictSUIDSGID
		"umask-file-mode 600",            // UMask=0077
	} {
		if !strings.Contains(string(got), want+"\n") {
			t.Errorf("confined shell: %q missing in:\n%s", want, got)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != "theirs" {
		t.Errorf("the other user's file changed: %q", b)
	}

	// The system call filter: a probe makes calls the filter denies, in a unit with the driver's
	// sandbox and in one with the same sandbox but no filter (the control, where each call is
	// allowed and fails, if at all, on its arguments).
	probe := filepath.Join(dir, "syscallprobe")
	build := exec.Command("go", "build", "-o", probe, "./integration/testdata/syscallprobe")
	build.Dir = filepath.Join(harness.RepoRoot(), "tests")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	runProbe := func(name string, props []sd.Property) map[string]string {
		log := filepath.Join(dir, name+".out")
		props = append([]sd.Property{
			sd.PropType("oneshot"),
			systemd.ExecProperty("ExecStart", []string{probe}),
			{Name: "StandardOutputFile", Value: dbus.MakeVariant(log)},
			{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
		}, props...)
		ch := make(chan string, 1)
		if _, err := conn.StartTransientUnitContext(context.Background(), name+".service", "fail", props, ch); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		if res := <-ch; res != "done" {
			t.Fatalf("%s: %s", name, res)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if call, res, ok := strings.Cut(line, " "); ok {
				got[call] = res
			}
		}
		return got
	}
	var unfiltered []sd.Property
	for _, p := range systemd.Sandbox() {
		if !strings.HasPrefix(p.Name, "SystemCall") {
			unfiltered = append(unfiltered, p)
		}
	}
	filtered, control := runProbe("s3csi-syscall-probe", systemd.Sandbox()), runProbe("s3csi-syscall-control", unfiltered)
	for _, call := range []string{"keyctl", "bpf", "perf_event_open", "swapoff", "quotactl"} {
		if filtered[call] != "EPERM" {
			t.Errorf("%s in the driver's sandbox: %q, want EPERM (refused by the filter)", call, filtered[call])
		}
		if control[call] == "" || control[call] == "EPERM" {
			t.Errorf("%s without the filter: %q, want the call made (so the filter is what refuses it)", call, control[call])
		}
	}
}

// TestUnitsConfinedWithoutHandover: with --fuse-helper-path empty (or a systemd before 246),
// mount-s3 mounts FUSE itself and keeps CAP_SYS_ADMIN, the one capability that needs, with the
// rest of the sandbox; the mount works the same.
func TestUnitsConfinedWithoutHandover(t *testing.T) {
	s := newSuite(t, true, "--fuse-helper-path=")
	s.s3.CreateBucket(t, "self-mounted")
	target := s.target("pod-a")
	s.publish(rw(target, "self-mounted", "allow-delete"))
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := s.s3.GetObject(t, "self-mounted", "hello.txt"); string(got) != "hi" {
		t.Errorf("object = %q", got)
	}
	out, err := s.sd.Systemctl("show", "--property=MainPID", "--value", systemd.MountUnitName(target))
	if err != nil {
		t.Fatalf("systemctl show: %v: %s", err, out)
	}
	pid := strings.TrimSpace(out)
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	const sysAdmin = "0000000000200000" // bit 21
	for _, want := range []string{"CapEff:\t" + sysAdmin, "CapBnd:\t" + sysAdmin, "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("mount-s3's /proc status lacks %q:\n%s", want, status)
		}
	}
	if cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline")); strings.Contains(string(cmdline), "/dev/fd/") {
		t.Errorf("mount-s3 serves a handed-over descriptor although the helper is off: %q", cmdline)
	}
	s.unpublish(target)
	s.assertClean(target)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
