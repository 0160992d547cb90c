package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Tests of how the session ends: mount-s3's libfuse 2 build unmounts its path once more on its
// way out, whatever is mounted there then.

// TestExitUnmountsWhatIsThereNow (row S1, the hazard): after an outside unmount of a directory
// mount, the exiting mount-s3 calls umount(path) without looking: a mount made at the same
// path in the meantime (a repair, a republish) is unmounted. The outside unmount is lazy and
// a descriptor keeps the old file system alive, so the new mount is in place before mount-s3
// sees the end of its connection.
func TestExitUnmountsWhatIsThereNow(t *testing.T) {
	f := newFixture(t, "bkt-exit-umount")
	f.s3.PutObject(t, f.bucket, "f", []byte("data"))
	dir, pidFile := mountDir(t)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir)...)
	held, err := os.Open(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		held.Close()
		t.Fatal(err)
	}
	if err := mountTmpfs(t, dir); err != nil { // the "repair"
		held.Close()
		t.Fatal(err)
	}
	held.Close() // the old file system goes; mount-s3's connection ends
	waitFor(t, "mount-s3 to exit", func() bool { return !alive(pid) })
	if n := mountsAt(t, dir); n != 0 {
		t.Errorf("%d mounts at %s after mount-s3 exited; want the new tmpfs unmounted by it", n, dir)
	}
}

// TestSignalLeavesBusyMount (rows S1, S2): on SIGTERM mount-s3 unmounts with a plain umount;
// a busy mount stays (dead once mount-s3 is gone), and mount-s3 still exits 0.
func TestSignalLeavesBusyMount(t *testing.T) {
	f := newFixture(t, "bkt-busy-sigterm")
	f.s3.PutObject(t, f.bucket, "f", []byte("data"))
	dir, _ := mountDir(t)
	cmd, wait, output := startForeground(t, f.env, nil, f.args(dir)...)
	waitServing(t, dir, output)
	held, err := os.Open(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, output())
	}
	if _, ok := mountEntry(dir); !ok {
		t.Errorf("the busy mount at %s went; want it left (mount-s3 makes no lazy unmount)", dir)
	}
	held.Close()
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
}

// TestAutoUnmountThroughFusermount (row P1): with --auto-unmount libfuse 2 has fusermount
// mount the directory and stay (holding mount-s3's standard streams): when mount-s3 dies, even
// by SIGKILL, fusermount unmounts.
func TestAutoUnmountThroughFusermount(t *testing.T) {
	if _, err := exec.LookPath("fusermount"); err != nil {
		t.Skip("no fusermount")
	}
	f := newFixture(t, "bkt-auto-unmount")
	dir, pidFile := mountDir(t)
	// fusermount stays, with mount-s3's standard output and error: give them a file, as
	// systemd does (a pipe would be held open until fusermount goes).
	out, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(standinBin, f.args(dir, "--auto-unmount")...)
	cmd.Env = append(f.env.list(), "UNSTABLE_MOUNTPOINT_PID_FILE="+pidFile)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("mount-s3: %v\n%s", err, b)
	}
	pid := readPid(pidFile)
	ent, ok := mountEntry(dir)
	if !ok {
		t.Fatalf("%s not mounted", dir)
	}
	if !strings.Contains(ent[2], "allow_other") || !strings.Contains(ent[2], "default_permissions") {
		t.Errorf("super options %q, want default_permissions and allow_other (fuser adds it for auto_unmount)", ent[2])
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fusermount to unmount "+dir, func() bool { _, ok := mountEntry(dir); return !ok })
}
