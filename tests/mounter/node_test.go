package mounter

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/version"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// The Mountpoint Pod's user and fsGroup.
const (
	podUID = 1000
	podGID = 1000
)

// waitTimeout bounds every wait; nothing waits for it on success.
const waitTimeout = 30 * time.Second

// mounterProc is bin/scality-csi-mounter running as the Mountpoint Pod's non-root user, with
// an explicit environment and its output in a log file. It is killed in t.Cleanup (mount-s3
// dies with it).
type mounterProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

func startMounter(t *testing.T, comm string, env []string, args ...string) *mounterProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "mounter.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(harness.Bin(t, "scality-csi-mounter"), append([]string{"--comm-dir=" + comm, "--mount-s3-path=" + harness.MountS3(t), "--v=4"}, args...)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: podUID, Gid: podGID, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the mounter: %v", err)
	}
	m := &mounterProc{t: t, cmd: cmd, done: make(chan struct{}), logPath: logPath}
	go func() { _ = cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-m.done
		if t.Failed() {
			t.Logf("mounter log:\n%s", m.log())
		}
	})
	return m
}

func (m *mounterProc) log() string { b, _ := os.ReadFile(m.logPath); return string(b) }

func (m *mounterProc) pid() int { return m.cmd.Process.Pid }

func (m *mounterProc) signal(sig syscall.Signal) {
	m.t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil {
		m.t.Fatalf("signal the mounter: %v", err)
	}
}

func (m *mounterProc) running() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// exitCode waits for the mounter to exit and returns its status.
func (m *mounterProc) exitCode() int {
	m.t.Helper()
	select {
	case <-m.done:
		return m.cmd.ProcessState.ExitCode()
	case <-time.After(waitTimeout):
		m.t.Fatalf("the mounter did not exit within %v; log:\n%s", waitTimeout, m.log())
		return -1
	}
}

// waitLog waits until the mounter logged s.
func (m *mounterProc) waitLog(s string) {
	m.t.Helper()
	eventually(m.t, "mounter log line "+strconv.Quote(s), func() bool { return strings.Contains(m.log(), s) })
}

// eventually polls cond (in test assertions only) until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node plays the node plugin for one Mountpoint Pod: a kubelet directory with the pod's comm
// emptyDir (group-owned by the fsGroup, like kubelet makes it), credential files the pod can
// read, and the shared source directory it FUSE-mounts and hands over.
type node struct {
	t      *testing.T
	s3     *harness.S3Server
	comm   string
	source string
	env    []string // mount-s3's environment
	// tmp is the pod's /tmp (its cache volume): the mounter's TMPDIR.
	tmp string
	// mounterArgs are added to the mounter's command line by startMounter.
	mounterArgs []string
}

func newNode(t *testing.T, s3 *harness.S3Server) *node {
	t.Helper()
	harness.RequireRoot(t)
	kubelet := harness.NewKubeletDir(t)
	harness.CleanupMounts(t, kubelet)
	n := &node{
		t:      t,
		s3:     s3,
		comm:   filepath.Join(kubelet, "pods", "0a1b2c3d-mountpoint-pod", "volumes", "kubernetes.io~empty-dir", "comm"),
		source: filepath.Join(kubelet, "plugins", version.DriverName, "mnt", "mp-test"),
		tmp:    filepath.Join(kubelet, "pods", "0a1b2c3d-mountpoint-pod", "volumes", "kubernetes.io~empty-dir", "tmp"),
	}
	mkdir(t, n.source, 0o755, 0)
	mkdir(t, n.tmp, 0o2770, podGID)
	mkdir(t, n.comm, 0o2770, podGID)
	if s3 != nil {
		creds := filepath.Join(n.comm, mountoptions.CredentialsDirName)
		mkdir(t, creds, 0o750, podGID)
		writeFile(t, filepath.Join(creds, "config"), "[profile s3-csi]\n", 0o640, podGID)
		writeFile(t, filepath.Join(creds, "credentials"), fmt.Sprintf("[s3-csi]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s3.AccessKey, s3.SecretKey), 0o640, podGID)
		n.env = []string{
			"AWS_REGION=" + s3.Region,
			"AWS_ENDPOINT_URL=" + s3.Endpoint,
			"AWS_PROFILE=s3-csi",
			"AWS_CONFIG_FILE=" + filepath.Join(creds, "config"),
			"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(creds, "credentials"),
		}
	}
	return n
}

// mkdir creates dir (and traversable parents) with mode, group-owned by gid.
func mkdir(t *testing.T, dir string, mode os.FileMode, gid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode, gid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func (n *node) path(name string) string { return filepath.Join(n.comm, name) }

func (n *node) startMounter(mounterEnv ...string) *mounterProc {
	n.t.Helper()
	m := startMounter(n.t, n.comm, append(slices.Clone(mounterEnv), "TMPDIR="+n.tmp), n.mounterArgs...)
	eventually(n.t, "the mounter's socket", func() bool {
		_, err := os.Stat(n.path(mountoptions.SocketName))
		return err == nil || !m.running()
	})
	if !m.running() {
		n.t.Fatalf("the mounter exited at start; log:\n%s", m.log())
	}
	return m
}

// mountFUSE opens /dev/fuse and mounts it at the source as the node plugin does; the caller
// hands the returned descriptor over and closes it.
func (n *node) mountFUSE() *os.File {
	n.t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		n.t.Fatalf("open /dev/fuse: %v", err)
	}
	n.t.Cleanup(func() { f.Close() })
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions", f.Fd())
	if err := unix.Mount("mountpoint-s3", n.source, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, data); err != nil {
		n.t.Fatalf("mount FUSE at %s: %v", n.source, err)
	}
	return f
}

// handOver mounts FUSE at the source and sends the options with its descriptor.
func (n *node) handOver(bucket string, args ...string) error {
	n.t.Helper()
	fuse := n.mountFUSE()
	defer fuse.Close() // the pod holds its own copy once Send returns
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return mountoptions.Send(ctx, n.path(mountoptions.SocketName), mountoptions.Options{BucketName: bucket, Args: args, Env: n.env}, int(fuse.Fd()))
}

// statSource stats the source in the background (it blocks until the FUSE server answers)
// and returns the result, failing the test after waitTimeout.
func (n *node) statSource() error {
	n.t.Helper()
	res := make(chan error, 1)
	go func() { _, err := os.Stat(n.source); res <- err }()
	select {
	case err := <-res:
		return err
	case <-time.After(waitTimeout):
		n.t.Fatalf("stat %s did not return within %v", n.source, waitTimeout)
		return nil
	}
}

// retire does what the node plugin does when the Mountpoint Pod has no workload left.
func (n *node) retire() {
	n.t.Helper()
	if err := os.WriteFile(n.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := unix.Unmount(n.source, 0); err != nil {
		n.t.Fatalf("unmount %s: %v", n.source, err)
	}
}

// rawSend writes data with fds in one message, half-closes and returns the reply.
func rawSend(t *testing.T, path string, data []byte, fds ...int) []byte {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix(data, oob, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.CloseWrite()
	b := make([]byte, 2048)
	k, _ := conn.Read(b) // a refusal of an unread message ends with a reset after the reply
	return b[:k]
}

// proc describes a process from /proc.
type proc struct {
	pid, ppid, pgrp int
	uid             string
	env, args       []string
}

func readProc(t *testing.T, pid int) proc {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	p := proc{pid: pid}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	status, _ := os.ReadFile(dir + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			p.uid = strings.Fields(rest)[0]
		}
	}
	env, _ := os.ReadFile(dir + "/environ")
	p.env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	args, _ := os.ReadFile(dir + "/cmdline")
	p.args = strings.Split(strings.TrimRight(string(args), "\x00"), "\x00")
	return p
}

// childOf returns the only child process of pid.
func childOf(t *testing.T, pid int) proc {
	t.Helper()
	var found []proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cpid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			found = append(found, readProc(t, cpid))
		}
	}
	if len(found) != 1 {
		t.Fatalf("process %d has %d children, want 1 (mount-s3)", pid, len(found))
	}
	return found[0]
}

// openFDs counts the open descriptors of pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
