package main

// Integration tests: the stand-in binary (built once in TestMain) against a real versitygw
// (harness.StartS3), with real FUSE mounts under t.TempDir(). They need root and /dev/fuse.

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/s3csi/s3-csi-driver/tests/harness"
	"golang.org/x/sys/unix"
)

var standinBin string // built by TestMain

const (
	cmdTimeout  = 60 * time.Second // a mount-s3 invocation (parent) must finish within this
	pollTimeout = 15 * time.Second // waiting for mount state changes
)

// TestMain builds the stand-in for the suites that run it, or takes the binary MOUNT_S3 names
// (the real mount-s3, for a run that holds the stand-in's rows against it; docs/development.md).
func TestMain(m *testing.M) {
	// The in-process tests parse command lines as the stand-in would: the machine's own AWS_*
	// variables (these machines set AWS_CA_BUNDLE, the env fallback of --ca-bundle) must not
	// reach them. Tests that want one set it themselves.
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "MOUNTPOINT_LOG=") {
			os.Unsetenv(strings.SplitN(kv, "=", 2)[0])
		}
	}
	if p := os.Getenv(harness.MountS3Env); p != "" {
		standinBin = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mounts3-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the session ACL tests run it as uid 1000
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	standinBin = filepath.Join(dir, "mount-s3")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
	}
	if out, err := exec.Command(goTool, "build", "-o", standinBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the stand-in: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
}

// env is the explicit environment for the stand-in: nothing is inherited but PATH.
type env map[string]string

func (e env) list() []string {
	out := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

// fixture is one S3 server and bucket plus the environment to reach it with root keys.
type fixture struct {
	s3     *harness.S3Server
	bucket string
	env    env
}

func newFixture(t *testing.T, bucket string) *fixture {
	needFUSE(t)
	s := harness.StartS3(t)
	s.CreateBucket(t, bucket)
	return &fixture{s3: s, bucket: bucket, env: env{
		"HOME": t.TempDir(), "AWS_ACCESS_KEY_ID": s.AccessKey, "AWS_SECRET_ACCESS_KEY": s.SecretKey,
	}}
}

// args returns the usual command line for the fixture's bucket on dir plus extra.
func (f *fixture) args(dir string, extra ...string) []string {
	return append([]string{f.bucket, dir, "--endpoint-url", f.s3.Endpoint, "--force-path-style"}, extra...)
}

// mountDir makes an empty mount point and registers a cleanup (run before the S3 server
// stops) that unmounts it if needed (umount, then umount -l) and kills a leftover stand-in
// whose pid the stand-in wrote to pidFile.
func mountDir(t *testing.T) (dir, pidFile string) {
	base := t.TempDir()
	dir, pidFile = filepath.Join(base, "mnt"), filepath.Join(base, "pid")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, ok := mountEntry(dir); ok {
			t.Errorf("%s still mounted at cleanup; unmounting", dir)
			if exec.Command("umount", dir).Run() != nil {
				_ = exec.Command("umount", "-l", dir).Run()
			}
		}
		if pid := readPid(pidFile); pid > 0 {
			for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("stand-in pid %d still running at cleanup; killing it", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return dir, pidFile
}

// run executes the stand-in to completion (bounded) with stdout/stderr captured through
// pipes, as a Go caller would; for a daemonising mount this also proves the child does not
// hold those pipes open.
func runStandin(t *testing.T, e env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, func(*exec.Cmd) {}, e, args...)
}

// mountEntry returns the /proc/self/mountinfo fields after " - " (fstype, source, super
// options) and the per-mount options for the mount at dir.
func mountEntry(dir string) ([]string, bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if ok && len(f) >= 6 && f[4] == dir {
			return append(strings.Fields(post), f[5]), true
		}
	}
	return nil, false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", pollTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPid(pidFile string) int {
	b, _ := os.ReadFile(pidFile)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// alive reports whether pid exists and is not a zombie (orphans may not be reaped here).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// daemonMount mounts with the default (daemonising) mode and checks that the parent exited 0
// with the mount in place. It returns the child's pid.
func daemonMount(t *testing.T, e env, dir, pidFile string, args ...string) int {
	t.Helper()
	e2 := env{"UNSTABLE_MOUNTPOINT_PID_FILE": pidFile}
	for k, v := range e {
		e2[k] = v
	}
	code, stdout, stderr := runStandin(t, e2, args...)
	if code != 0 {
		t.Fatalf("mount-s3 %q exited %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
	}
	if _, ok := mountEntry(dir); !ok {
		t.Fatalf("mount-s3 exited 0 but %s is not mounted; stderr: %s", dir, stderr)
	}
	if !strings.Contains(stdout, "is mounted at "+dir) {
		t.Errorf("stdout %q lacks the success line", stdout)
	}
	pid := readPid(pidFile)
	if pid <= 0 || !alive(pid) {
		t.Fatalf("daemon child (pid %d from %s) is not running", pid, pidFile)
	}
	return pid
}

// unmountAndWait runs umount(8) and waits until the mount is gone and pid has exited.
func unmountAndWait(t *testing.T, dir string, pid int) {
	t.Helper()
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", dir, err, out)
	}
	waitFor(t, "mount to disappear", func() bool { _, ok := mountEntry(dir); return !ok })
	if pid > 0 {
		waitFor(t, fmt.Sprintf("stand-in pid %d to exit after umount", pid), func() bool { return !alive(pid) })
	}
}

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestDaemonMountReadWrite(t *testing.T) {
	f := newFixture(t, "bkt-daemon")
	big := randomBytes(3<<20+12345, 1)
	f.s3.PutObject(t, f.bucket, "dir/big.bin", big)
	f.s3.PutObject(t, f.bucket, "top.txt", []byte("top"))
	dir, pidFile := mountDir(t)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir)...)

	ent, _ := mountEntry(dir)
	if ent[0] != "fuse" || ent[1] != "mountpoint-s3" || !strings.Contains(ent[2], "default_permissions") {
		t.Fatalf("mountinfo for %s = %q, want type fuse, source mountpoint-s3, default_permissions", dir, ent)
	}
	var sfs unix.Statfs_t
	if n := ^uint64(0) / 1024; unix.Statfs(dir, &sfs) != nil || sfs.Blocks != n || sfs.Bavail != n || sfs.Files != n ||
		sfs.Ffree != n || sfs.Bsize != 512 || sfs.Namelen != 255 {
		t.Errorf("statfs = %+v; want blocks, free and available blocks, files and free files all %d, block size 512, names up to 255 (row F1)", sfs, n)
	}

	written := randomBytes(300<<10+7, 2)
	if err := os.WriteFile(filepath.Join(dir, "dir", "new.bin"), written, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got := f.s3.GetObject(t, f.bucket, "dir/new.bin"); !bytes.Equal(got, written) {
		t.Fatalf("object dir/new.bin has %d bytes, want the %d written", len(got), len(written))
	}

	ents, err := os.ReadDir(filepath.Join(dir, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if d := cmp.Diff([]string{"big.bin", "new.bin"}, names); d != "" {
		t.Fatalf("listing of dir (-want +got):\n%s", d)
	}
	got, err := os.ReadFile(filepath.Join(dir, "dir", "big.bin"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read of dir/big.bin: %d bytes, %v; want %d identical bytes", len(got), err, len(big))
	}
	fh, err := os.Open(filepath.Join(dir, "dir", "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for _, off := range []int64{2 << 20, 5, int64(len(big)) - 1000, 1 << 20} {
		buf := make([]byte, 4096)
		n, _ := fh.ReadAt(buf, off)
		if want := big[off:min(off+4096, int64(len(big)))]; !bytes.Equal(buf[:n], want) {
			t.Fatalf("random read at %d returned %d bytes that differ from the object", off, n)
		}
	}
	fh.Close()
	unmountAndWait(t, dir, pid)
}

func TestStartupErrors(t *testing.T) {
	f := newFixture(t, "bkt-errors")
	t.Run("missing bucket", func(t *testing.T) {
		for _, fg := range []bool{false, true} {
			dir, _ := mountDir(t)
			args := []string{"no-such-bucket", dir, "--endpoint-url", f.s3.Endpoint, "--force-path-style"}
			if fg {
				args = append(args, "--foreground")
			}
			code, _, stderr := runStandin(t, f.env, args...)
			want := "Error: Failed to create S3 client\n\nCaused by:\n    0: initial ListObjectsV2 failed for bucket no-such-bucket in region us-east-1\n    1: Service error\n    2: The bucket does not exist\n"
			if !fg {
				want += "Error: Failed to create mount process\n"
			}
			if code != 1 || !strings.HasSuffix(stderr, want) {
				t.Fatalf("foreground=%v: exit %d, stderr:\n%s\nwant exit 1 and, at the end:\n%s", fg, code, stderr, want)
			}
			if _, ok := mountEntry(dir); ok {
				t.Fatalf("%s is mounted after a failed start", dir)
			}
		}
	})

	t.Run("endpoint and region from the environment, --region overrides", func(t *testing.T) {
		e := env{"AWS_ENDPOINT_URL": f.s3.Endpoint, "AWS_REGION": "eu-west-2"}
		for k, v := range f.env {
			e[k] = v
		}
		dir, pidFile := mountDir(t)
		code, _, stderr := runStandin(t, e, f.bucket, dir, "--force-path-style")
		// versitygw only accepts signatures for us-east-1, so AWS_REGION must have been used.
		if code != 1 || !strings.Contains(stderr, "in region eu-west-2") {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 naming region eu-west-2", code, stderr)
		}
		pid := daemonMount(t, e, dir, pidFile, f.bucket, dir, "--force-path-style", "--region", "us-east-1")
		unmountAndWait(t, dir, pid)
	})

	profiles := t.TempDir()
	config, creds := filepath.Join(profiles, "config"), filepath.Join(profiles, "credentials")
	const badSecret = "wrong-secret-do-not-print"
	mustWrite(t, config, "[profile good]\nregion = us-east-1\n[profile bad]\nregion = us-east-1\n")
	mustWrite(t, creds, fmt.Sprintf("[good]\naws_access_key_id = %s\naws_secret_access_key = %s\n[bad]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		f.s3.AccessKey, f.s3.SecretKey, f.s3.AccessKey, badSecret))
	profileEnv := func(profile string) env {
		return env{"HOME": profiles, "AWS_PROFILE": profile, "AWS_CONFIG_FILE": config, "AWS_SHARED_CREDENTIALS_FILE": creds}
	}

	t.Run("wrong credentials from profile files", func(t *testing.T) {
		dir, _ := mountDir(t)
		code, _, stderr := runStandin(t, profileEnv("bad"), f.args(dir)...)
		if code != 1 || !strings.Contains(stderr, "initial ListObjectsV2 failed") ||
			!strings.Contains(stderr, "    1: Client error\n    2: Forbidden: The request signature we calculated does not match") {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 with Forbidden: and S3's message (row X2)", code, stderr)
		}
		if strings.Contains(stderr, badSecret) {
			t.Fatalf("stderr leaks the secret key:\n%s", stderr)
		}
		if _, ok := mountEntry(dir); ok {
			t.Fatalf("%s is mounted after a failed start", dir)
		}
	})

	for _, tc := range []struct {
		name, key string
		env       env
		args      []string
	}{
		{"right credentials from profile files", "via-aws-profile", profileEnv("good"), nil},
		{"--profile overrides AWS_PROFILE", "via-profile-flag", profileEnv("bad"), []string{"--profile", "good"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, pidFile := mountDir(t)
			pid := daemonMount(t, tc.env, dir, pidFile, f.args(dir, tc.args...)...)
			if err := os.WriteFile(filepath.Join(dir, tc.key), []byte(tc.name), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := f.s3.GetObject(t, f.bucket, tc.key); string(got) != tc.name {
				t.Fatalf("object = %q", got)
			}
			unmountAndWait(t, dir, pid)
		})
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMountOptions(t *testing.T) {
	f := newFixture(t, "bkt-options")
	f.s3.PutObject(t, f.bucket, "existing", []byte("original"))
	f.s3.PutObject(t, f.bucket, "team/inside", []byte("inside"))

	withMount := func(t *testing.T, extra []string, body func(dir string)) {
		dir, pidFile := mountDir(t)
		logDir := t.TempDir()
		t.Cleanup(func() {
			if t.Failed() {
				logs, _ := filepath.Glob(filepath.Join(logDir, "*"))
				for _, l := range logs {
					b, _ := os.ReadFile(l)
					t.Logf("stand-in log %s:\n%s", l, b)
				}
			}
		})
		extra = append(extra, "--log-directory", logDir, "--debug")
		pid := daemonMount(t, f.env, dir, pidFile, f.args(dir, extra...)...)
		body(dir)
		unmountAndWait(t, dir, pid)
	}
	t.Run("read-only", func(t *testing.T) {
		withMount(t, []string{"--read-only"}, func(dir string) {
			if ent, _ := mountEntry(dir); !strings.HasPrefix(ent[3], "ro") {
				t.Errorf("mount options %q, want ro", ent[3])
			}
			wantErrno(t, "create", os.WriteFile(filepath.Join(dir, "nope"), []byte("x"), 0o644), syscall.EROFS)
			if b, err := os.ReadFile(filepath.Join(dir, "existing")); err != nil || string(b) != "original" {
				t.Fatalf("read on read-only mount = %q, %v", b, err)
			}
		})
	})
	t.Run("delete and overwrite denied by default", func(t *testing.T) {
		withMount(t, nil, func(dir string) {
			wantErrno(t, "rm", os.Remove(filepath.Join(dir, "existing")), syscall.EPERM)
			wantErrno(t, "overwrite", os.WriteFile(filepath.Join(dir, "existing"), []byte("new"), 0o644), syscall.EPERM)
			if !f.s3.ObjectExists(t, f.bucket, "existing") {
				t.Fatal("object deleted although --allow-delete is off")
			}
		})
	})
	t.Run("allow-overwrite and allow-delete", func(t *testing.T) {
		withMount(t, []string{"--allow-overwrite", "--allow-delete"}, func(dir string) {
			p := filepath.Join(dir, "existing")
			_, err := os.OpenFile(p, os.O_WRONLY, 0)
			wantErrno(t, "open for write without O_TRUNC", err, syscall.EPERM)
			if err := os.WriteFile(p, []byte("replaced"), 0o644); err != nil {
				t.Fatalf("overwrite: %v", err)
			}
			if got := f.s3.GetObject(t, f.bucket, "existing"); string(got) != "replaced" {
				t.Fatalf("object after overwrite = %q", got)
			}
			if err := os.Remove(p); err != nil {
				t.Fatalf("rm: %v", err)
			}
			if f.s3.ObjectExists(t, f.bucket, "existing") {
				t.Fatal("object still exists after rm with --allow-delete")
			}
		})
	})
	t.Run("prefix", func(t *testing.T) {
		withMount(t, []string{"--prefix", "team/"}, func(dir string) {
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != 1 || ents[0].Name() != "inside" {
				t.Fatalf("prefix listing = %v, %v; want [inside]", ents, err)
			}
			if err := os.WriteFile(filepath.Join(dir, "added"), []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			if !f.s3.ObjectExists(t, f.bucket, "team/added") {
				t.Fatalf("keys = %q, want team/added", f.s3.ListKeys(t, f.bucket))
			}
		})
	})
}

func TestFsGroupPermissions(t *testing.T) {
	f := newFixture(t, "bkt-fsgroup")
	f.s3.PutObject(t, f.bucket, "shared.txt", []byte("shared"))
	dir, pidFile := mountDir(t)
	openParents(t, dir)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir, "--gid=1234", "--dir-mode=770", "--file-mode=660", "--allow-other")...)
	if ent, _ := mountEntry(dir); !strings.Contains(ent[2], "allow_other") {
		t.Fatalf("super options %q lack allow_other", ent[2])
	}
	fi, err := os.Stat(filepath.Join(dir, "shared.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Gid != 1234 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("shared.txt gid %d mode %v, want 1234 and 0660", st.Gid, fi.Mode())
	}

	as := func(uid, gid uint32, script string) (string, error) { return runAs(dir, uid, gid, script) }
	out, err := as(2000, 1234, `cat "$D/shared.txt" && printf member > "$D/by-2000" && cat "$D/by-2000" && ls "$D"`)
	if err != nil || !strings.Contains(out, "sharedmember") || !strings.Contains(out, "by-2000") {
		t.Fatalf("uid 2000 gid 1234: %v\n%s", err, out)
	}
	if got := f.s3.GetObject(t, f.bucket, "by-2000"); string(got) != "member" {
		t.Fatalf("object by-2000 = %q", got)
	}
	for _, script := range []string{`ls "$D"`, `cat "$D/shared.txt"`, `printf x > "$D/by-999"`} {
		out, err := as(2000, 999, script)
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("uid 2000 gid 999 running %s: err %v, output %q; want Permission denied (EACCES)", script, err, out)
		}
	}
	if f.s3.ObjectExists(t, f.bucket, "by-999") {
		t.Fatal("non-member created an object")
	}
	unmountAndWait(t, dir, pid)
}

// runAs runs a shell script as uid/gid (no supplementary groups) with $D set to dir.
func runAs(dir string, uid, gid uint32, script string) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "D=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// openParents makes the t.TempDir() directories above a mount point (0700) traversable.
func openParents(t *testing.T, dir string) {
	for _, p := range []string{filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAllowRoot(t *testing.T) {
	f := newFixture(t, "bkt-allowroot")
	f.s3.PutObject(t, f.bucket, "f", []byte("f"))
	dir, pidFile := mountDir(t)
	openParents(t, dir)
	pid := daemonMount(t, f.env, dir, pidFile, f.args(dir, "--allow-root", "--dir-mode=777", "--file-mode=666")...)
	if ent, _ := mountEntry(dir); !strings.Contains(ent[2], "allow_other") {
		t.Fatalf("super options %q lack allow_other", ent[2])
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "f" {
		t.Fatalf("root read = %q, %v", b, err)
	}
	// Modes allow everyone; only the allow_root gate can refuse uid 2000.
	if out, err := runAs(dir, 2000, 2000, `ls "$D"`); err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("uid 2000 on an --allow-root mount: err %v, output %q; want Permission denied", err, out)
	}
	unmountAndWait(t, dir, pid)
}

// startForeground starts a --foreground stand-in; the returned wait reports its exit code
// (bounded). Cleanup kills it if it is still running.
func startForeground(t *testing.T, e env, extraFiles []*os.File, args ...string) (cmd *exec.Cmd, wait func() int, output func() string) {
	t.Helper()
	return startForegroundAs(t, e, nil, extraFiles, args...)
}

// startForegroundAs is startForeground with the stand-in running as cred (nil: as this test).
func startForegroundAs(t *testing.T, e env, cred *syscall.Credential, extraFiles []*os.File, args ...string) (cmd *exec.Cmd, wait func() int, output func() string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "out.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd = exec.Command(standinBin, append(args, "--foreground")...)
	cmd.Env = e.list()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extraFiles
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	output = func() string { b, _ := os.ReadFile(logPath); return string(b) }
	wait = func() int {
		select {
		case <-done:
			return cmd.ProcessState.ExitCode()
		case <-time.After(pollTimeout):
			t.Fatalf("stand-in did not exit within %v; output:\n%s", pollTimeout, output())
			return -1
		}
	}
	return cmd, wait, output
}

func TestDevFdHandover(t *testing.T) {
	f := newFixture(t, "bkt-devfd")
	f.s3.PutObject(t, f.bucket, "hello", []byte("world"))
	dir, _ := mountDir(t)
	fuseFile, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", fuseFile.Fd())
	if err := unix.Mount("mountpoint-s3", dir, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, data); err != nil {
		fuseFile.Close()
		t.Fatalf("mount: %v", err)
	}
	_, wait, output := startForeground(t, f.env, []*os.File{fuseFile}, f.args("/dev/fd/3")...)
	// Only the stand-in may hold the device now: if it dies, the connection aborts and our
	// accesses fail instead of hanging.
	fuseFile.Close()

	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(dir, "hello"))
		got <- fmt.Sprintf("%s %v", b, err)
	}()
	select {
	case g := <-got:
		if g != "world <nil>" {
			t.Fatalf("read through handed-over fd = %q; output:\n%s", g, output())
		}
	case <-time.After(pollTimeout):
		t.Fatalf("no answer through the handed-over fd within %v; output:\n%s", pollTimeout, output())
	}
	if err := os.WriteFile(filepath.Join(dir, "from-fd"), []byte("fd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := f.s3.GetObject(t, f.bucket, "from-fd"); string(b) != "fd" {
		t.Fatalf("object = %q", b)
	}
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d after umount; output:\n%s", code, output())
	}
}

func TestForegroundSIGTERM(t *testing.T) {
	f := newFixture(t, "bkt-sigterm")
	dir, _ := mountDir(t)
	cmd, wait, output := startForeground(t, f.env, nil, f.args(dir)...)
	waitServing(t, dir, output)
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatalf("readdir: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, output())
	}
	if _, ok := mountEntry(dir); ok {
		t.Fatalf("%s still mounted after SIGTERM", dir)
	}
	if !strings.Contains(output(), "bucket bkt-sigterm is mounted at "+dir) {
		t.Errorf("output lacks the success line:\n%s", output())
	}
}
