package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// Env must be "1" for this package to boot a guest (make test-vm sets it): the boot costs
// minutes of CPU, so the tests module's other runs skip it.
const Env = "S3CSI_VM"

// guest is the VM every test of the package runs in (booted once by TestMain).
var guest *VM

func TestMain(m *testing.M) {
	if os.Getenv(Env) != "1" {
		fmt.Printf("skipping the VM rig: set %s=1 (make test-vm)\n", Env)
		return
	}
	code, err := boot(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vm rig:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// boot builds (or finds) the image and the binaries disk, boots the guest, runs the tests and
// stops it, printing the figures the ADR quotes.
func boot(m *testing.M) (int, error) {
	root := harness.RepoRoot()
	t0 := time.Now()
	out, err := exec.Command("bash", filepath.Join(root, "tests", "tools", "vm-image.sh"), filepath.Join(root, "bin", "vm")).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("vm-image.sh: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	img := Image{Dir: lines[len(lines)-1]}
	fmt.Printf("vm rig: image %s (%.1f s)\n", img.Dir, time.Since(t0).Seconds())

	work, err := os.MkdirTemp("", "s3csi-vm-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	binDir := filepath.Join(work, "bin")
	t1 := time.Now()
	if err := binaries(root, binDir); err != nil {
		return 0, err
	}
	fmt.Printf("vm rig: binaries disk contents in %.1f s\n", time.Since(t1).Seconds())

	v, err := Boot(Options{Image: img, BinDir: binDir, WorkDir: work}, 10*time.Minute)
	if err != nil {
		tailFile(filepath.Join(work, "console.log"))
		return 0, err
	}
	guest = v
	fmt.Printf("vm rig: guest agent answered %.1f s after qemu started (KVM: %v)\n", v.BootSeconds, KVMUsable())
	t2 := time.Now()
	code := m.Run()
	fmt.Printf("vm rig: tests took %.1f s; qemu peak RSS %d MiB\n", time.Since(t2).Seconds(), v.RSSKiB()>>10)
	if code != 0 {
		tailFile(v.ConsoleLog)
	}
	v.Close()
	return code, nil
}

// binaries fills dir with what the guest runs: the agent and the guest test binary (built
// here), the node plugin, the FUSE helper, the mount-s3 stand-in and versitygw (from bin/).
func binaries(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tests := filepath.Join(root, "tests")
	for _, c := range [][]string{
		{"build", "-o", filepath.Join(dir, "vm-agent"), "./vm/agent"},
		{"test", "-c", "-o", filepath.Join(dir, "guest.test"), "./vm/guest"},
	} {
		// The host's build configuration (the guest is the same Debian release, so its C
		// library serves a cgo binary): the guest test binary shares the compiled packages of
		// the cluster suite's test binary instead of compiling client-go & co. once more.
		cmd := exec.Command("go", c...)
		cmd.Dir = tests
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	for _, name := range []string{"scality-s3-csi-driver", "scality-fuse-helper", "mount-s3", "versitygw"} {
		if err := copyFile(filepath.Join(root, "bin", name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%w (run make build and make bin/versitygw first)", err)
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func tailFile(path string) {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	fmt.Fprintf(os.Stderr, "--- last lines of %s ---\n%s\n", path, strings.Join(lines, "\n"))
}

// runGuestTest runs one test of tests/vm/guest inside the guest and fails t with its output
// unless it passed. A guest test that was not found or skipped counts as a failure: each host
// test exists to see its guest test pass.
func runGuestTest(t *testing.T, name string, timeout time.Duration, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := guest.Run(ctx, []string{"/opt/s3csi/guest.test", "-test.run", "^" + name + "$", "-test.v", "-test.timeout", timeout.String()},
		append([]string{"S3CSI_VM_GUEST=1", harness.BinDirEnv + "=/opt/s3csi", "TMPDIR=/var/tmp"}, env...)...)
	if err != nil {
		t.Fatalf("run %s in the guest: %v", name, err)
	}
	out := string(r.Stdout) + string(r.Stderr)
	t.Logf("guest: %s exit %d in %.1f s\n%s", name, r.Exit, r.Seconds, out)
	if r.Exit != 0 || r.Error != "" {
		t.Fatalf("%s failed in the guest (exit %d %s)", name, r.Exit, r.Error)
	}
	if !strings.Contains(out, "--- PASS: "+name) {
		t.Fatalf("%s did not report a pass in the guest (not run, or skipped)", name)
	}
}

// TestAgentReportsExitCodes shows the channel itself: a command's exit status and both
// output streams come back unchanged.
func TestAgentReportsExitCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := guest.Run(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit != 7 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
		t.Fatalf("got exit %d stdout %q stderr %q, want 7 \"out\\n\" \"err\\n\"", r.Exit, r.Stdout, r.Stderr)
	}
}

func TestPID1IsSystemdOnCgroup2(t *testing.T) {
	runGuestTest(t, "TestPID1IsSystemdOnCgroup2", 3*time.Minute)
}

func TestMemoryMaxKillsUnit(t *testing.T) { runGuestTest(t, "TestMemoryMaxKillsUnit", 5*time.Minute) }

func TestPublishThroughPID1(t *testing.T) { runGuestTest(t, "TestPublishThroughPID1", 10*time.Minute) }

func TestFaultsThroughPID1(t *testing.T) { runGuestTest(t, "TestFaultsThroughPID1", 20*time.Minute) }

func TestAdoptLegacyMountOnPID1(t *testing.T) {
	runGuestTest(t, "TestAdoptLegacyMountOnPID1", 10*time.Minute)
}

func TestPrivilegedCommandsKeepTheUnitNamespace(t *testing.T) {
	runGuestTest(t, "TestPrivilegedCommandsKeepTheUnitNamespace", 3*time.Minute)
}

func TestCredentialsOnUnitRamfs(t *testing.T) {
	runGuestTest(t, "TestCredentialsOnUnitRamfs", 3*time.Minute)
}

func TestCPULimitThroughPID1(t *testing.T) {
	runGuestTest(t, "TestCPULimitThroughPID1", 10*time.Minute)
}

func TestProtectSystemThroughPID1(t *testing.T) {
	runGuestTest(t, "TestProtectSystemThroughPID1", 10*time.Minute)
}

// TestRebootWithLiveMount reboots the guest, a node's real reboot, with a systemd-mode mount of
// PID 1 live on it: TestRebootBefore publishes and writes, the guest reboots (systemctl reboot;
// the disk keeps what was written), and TestRebootAfter sees the unit, the mount and the
// credential files gone, the record kept, and kubelet's republish of the same target serve the
// data again, then unpublish leave nothing. It runs last: the reboot ends every process the
// other tests might have left.
func TestRebootWithLiveMount(t *testing.T) {
	env := "S3CSI_VM_REBOOT_DIR=/var/lib/s3csi-vm-reboot" // guest.RebootDirEnv
	runGuestTest(t, "TestRebootBefore", 5*time.Minute, env)
	secs, err := guest.Reboot(10 * time.Minute)
	if err != nil {
		t.Fatalf("reboot the guest: %v", err)
	}
	t.Logf("the guest rebooted: its agent answered %.1f s after systemctl reboot", secs)
	fmt.Printf("vm rig: reboot to the agent's answer %.1f s\n", secs)
	runGuestTest(t, "TestRebootAfter", 10*time.Minute, env)
}
