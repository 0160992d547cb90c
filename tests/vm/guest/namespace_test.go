package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// The facts ADR 0010 decided on, measured again on a system manager (PID 1, systemd 252 of
// Debian bookworm) instead of the user manager of tests/. Each test pins what it found: when a
// later systemd behaves otherwise, it fails and the ADR's decision is to be revisited.

// runProbe starts a transient unit of PID 1 with systemd-run and the given properties, and
// stops it (and resets it) at the end of the test. It returns systemd-run's error and output.
func runProbe(t *testing.T, unit string, props []string, argv ...string) ([]byte, error) {
	t.Helper()
	args := []string{"--unit=" + unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := exec.Command("systemd-run", append(args, argv...)...).CombinedOutput()
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", unit).Run()
		_ = exec.Command("systemctl", "reset-failed", unit).Run()
	})
	return out, err
}

func mntNS(t *testing.T, pid string) string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
	if err != nil {
		t.Fatalf("mount namespace of %s: %v", pid, err)
	}
	return ns
}

// TestPrivilegedCommandsKeepTheUnitNamespace: on PID 1, as on the user manager, a "+" command
// of a unit with a mount namespace (ProtectSystem=strict, PrivateTmp) does not run in the host's
// mount namespace: a mount it makes is seen neither by the host (kubelet, workloads) nor by the
// unit's main process. This is why the mount-s3 units keep no mount namespace of their own
// (ADR 0010): their helper's FUSE mount and binds must be the host's.
func TestPrivilegedCommandsKeepTheUnitNamespace(t *testing.T) {
	dir, err := os.MkdirTemp("/run", "s3csi-ns-probe-")
	harness.Must(t, err)
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(dir, "m"), syscall.MNT_DETACH); _ = os.RemoveAll(dir) })
	harness.Must(t, os.Mkdir(filepath.Join(dir, "m"), 0o755))
	unit := fmt.Sprintf("s3csi-vm-ns-%d.service", time.Now().UnixNano())
	pre := "readlink /proc/self/ns/mnt > " + dir + "/m/pre-ns 2>/dev/null || readlink /proc/self/ns/mnt; " +
		"mount -t tmpfs s3csi-ns-probe " + dir + "/m && touch " + dir + "/m/mounted"
	out, err := runProbe(t, unit, []string{"ProtectSystem=strict", "PrivateTmp=yes", "ExecStartPre=+/bin/sh -c '" + pre + "'"},
		"/bin/sleep", "600")
	if err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}
	m := &pid1{t: t}
	main := m.mainPID(unit)
	if main == 0 {
		t.Fatalf("%s has no main process", unit)
	}
	host, unitNS := mntNS(t, "1"), mntNS(t, strconv.Itoa(main))
	t.Logf("PID 1 %s, ExecStart %s", host, unitNS)
	if host == unitNS {
		t.Fatalf("ExecStart runs in PID 1's mount namespace: the sandbox did not make one")
	}
	// The "+" command ran in a mount namespace of its own: not PID 1's (its mount is not in
	// the host's table), not the main process's (which does not hold it either; the two may
	// show the same namespace inode, which the kernel reuses once the first one is freed).
	// What it wrote below /run before mounting reached the host's /run: ProtectSystem's
	// read-only views did not apply to it, the namespace did.
	preNS, err := os.ReadFile(filepath.Join(dir, "m", "pre-ns"))
	if err != nil {
		t.Fatalf("the + command's note of its namespace is not in the host's %s: %v", dir, err)
	}
	preID := strings.TrimSpace(string(preNS))
	t.Logf("ExecStartPre=+ %s", preID)
	if preID == host {
		t.Errorf("the + command ran in PID 1's mount namespace: revisit ADR 0010 (a confined unit's helper could mount for the host)")
	}
	if left := harness.MountsBelow(filepath.Join(dir, "m")); len(left) != 0 {
		t.Errorf("the + command's tmpfs is mounted in the host's namespace (%v): revisit ADR 0010", left)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", main))
	harness.Must(t, err)
	if strings.Contains(string(b), " "+dir+"/m ") {
		t.Errorf("the unit's main process holds the + command's mount: the + command shares the unit's namespace")
	}
	journal := journalOf(t, unit)
	t.Logf("journal of %s:\n%s", unit, journal)
}

// TestCredentialsOnUnitRamfs: LoadCredential= on PID 1 gives a unit its credential on a file
// system of its own under /run/credentials/<unit>, readable by the unit's user alone, without a
// mount namespace; the source file can be removed once the unit runs; the copy goes away when
// the unit stops. What a credential hand-over for mount-s3 would rely on (issue 45, item 4).
func TestCredentialsOnUnitRamfs(t *testing.T) {
	src, err := os.MkdirTemp("/run", "s3csi-cred-probe-")
	harness.Must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(src) })
	secret := "aws_secret_access_key=probe-not-a-real-key\n"
	harness.Must(t, os.WriteFile(filepath.Join(src, "aws"), []byte(secret), 0o600))
	unit := fmt.Sprintf("s3csi-vm-cred-%d.service", time.Now().UnixNano())
	out, err := runProbe(t, unit, []string{"User=nobody", "LoadCredential=aws:" + filepath.Join(src, "aws")},
		"/bin/sh", "-c", `cat "$CREDENTIALS_DIRECTORY/aws" >/dev/null && echo read-ok && exec sleep 600`)
	if err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}
	m := &pid1{t: t}
	waitFor(t, time.Minute, "the unit to read its credential", func() bool { return strings.Contains(journalOf(t, unit), "read-ok") })
	harness.Must(t, os.Remove(filepath.Join(src, "aws")))
	main := m.mainPID(unit)
	if ns := mntNS(t, strconv.Itoa(main)); ns != mntNS(t, "1") {
		t.Errorf("LoadCredential gave the unit a mount namespace of its own (%s)", ns)
	}
	dir := "/run/credentials/" + unit
	var fsType string
	for _, line := range strings.Split(readFile(t, "/proc/self/mountinfo"), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			for i, x := range f {
				if x == "-" && i+1 < len(f) {
					fsType = f[i+1]
				}
			}
		}
	}
	if fsType != "ramfs" && fsType != "tmpfs" {
		t.Errorf("%s is on %q, want a ramfs (or tmpfs) of its own", dir, fsType)
	}
	st, err := os.Stat(filepath.Join(dir, "aws"))
	harness.Must(t, err)
	nobody := uint32(65534)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != nobody || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s/aws is %v owned by %d, want the unit's user alone (uid %d)", dir, st.Mode(), sys.Uid, nobody)
	}
	if b := readFile(t, filepath.Join(dir, "aws")); b != secret {
		t.Errorf("the unit's copy differs from its source")
	}
	t.Logf("%s: %s, %v", dir, fsType, st.Mode())
	systemctl(t, "stop", unit)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the unit stopped: %v", dir, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	harness.Must(t, err)
	return string(b)
}
