// Package mounter tests the Mountpoint Pod program (bin/scality-csi-mounter) as a real,
// non-root process against the mount-s3 stand-in, versitygw and real FUSE mounts, with the
// test playing the node plugin: comm directory, credential files, FUSE mount of the source,
// the options hand-over, mount.exit and the unmount.
package mounter

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestServeAndRetire is the whole life of a Mountpoint Pod: hand-over, serving reads, writes
// and deletes, ignoring SIGTERM/SIGINT while serving, and exit 0 after mount.exit + unmount.
func TestServeAndRetire(t *testing.T) {
	s3 := harness.StartS3(t)
	const bucket = "bkt-serve"
	s3.CreateBucket(t, bucket)
	s3.PutObject(t, bucket, "hello.txt", []byte("world"))
	n := newNode(t, s3)
	// Nothing of the mounter's own environment may reach mount-s3. The cache is bounded as the
	// Pod Reconciler bounds it (the pod's /tmp volume): mount-s3 gets --max-cache-size.
	n.mounterArgs = []string{"--max-cache-size-mib=900"}
	m := n.startMounter("PATH=/usr/bin:/bin", "AWS_CA_BUNDLE=/nonexistent/ca.pem", "AWS_REGION=eu-mars-1", "CANARY=1")

	if err := os.WriteFile(n.path(mountoptions.ErrorFileName), []byte("stale error"), 0o644); err != nil {
		t.Fatal(err)
	}
	// --allow-root as the node plugin sends it: mount-s3 runs as the pod's user, and this test
	// (root) reads through the mount. The two options of the mount call are dropped.
	if err := n.handOver(bucket, "--allow-delete", "--allow-root", "--force-path-style", "--read-only", "--auto-unmount", "--cache=/host/cache", "--log-directory=/host/logs"); err != nil {
		t.Fatalf("hand-over: %v\nmounter log:\n%s", err, m.log())
	}
	if _, err := os.Stat(n.path(mountoptions.ErrorFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale mount.err not removed before the acknowledgement: %v", err)
	}
	if err := n.statSource(); err != nil {
		t.Fatalf("the source is not served: %v\nmounter log:\n%s", err, m.log())
	}

	// The bucket is served at the source, both ways.
	if b, err := os.ReadFile(filepath.Join(n.source, "hello.txt")); err != nil || string(b) != "world" {
		t.Fatalf("read through the mount = %q, %v", b, err)
	}
	data := make([]byte, 300<<10)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(n.source, "dir/written.bin"), data, 0o644); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	if err := os.WriteFile(filepath.Join(n.source, "written.bin"), data, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got := s3.GetObject(t, bucket, "written.bin"); !bytes.Equal(got, data) {
		t.Fatalf("object differs from what was written (%d vs %d bytes)", len(got), len(data))
	}
	if err := os.Remove(filepath.Join(n.source, "hello.txt")); err != nil {
		t.Fatalf("delete through the mount (--allow-delete): %v", err)
	}
	if s3.ObjectExists(t, bucket, "hello.txt") {
		t.Fatal("object still exists after the delete")
	}

	// mount-s3: the pod's user, its own process group, exactly the sent environment, the
	// rewritten arguments.
	ms3 := childOf(t, m.pid())
	if ms3.uid != strconv.Itoa(podUID) {
		t.Errorf("mount-s3 runs as uid %s, want %d", ms3.uid, podUID)
	}
	if ms3.pgrp != ms3.pid {
		t.Errorf("mount-s3 is in process group %d, want its own (%d)", ms3.pgrp, ms3.pid)
	}
	if diff := cmp.Diff(n.env, ms3.env); diff != "" {
		t.Errorf("mount-s3's environment is not exactly the sent one (-sent +got):\n%s", diff)
	}
	wantArgs := []string{harness.MountS3(t), bucket, "/dev/fd/3", "--foreground", "--allow-delete", "--allow-root", "--force-path-style"}
	if len(ms3.args) != 9 || !slices.Equal(ms3.args[:7], wantArgs) || ms3.args[7] != "--cache="+filepath.Join(n.tmp, "mount-s3-cache") || ms3.args[8] != "--max-cache-size=900" {
		t.Errorf("mount-s3 command line = %q, want %q + --cache=<dir in the pod> --max-cache-size=900", ms3.args, wantArgs)
	}
	if _, err := os.Stat(n.path(mountoptions.SocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there while serving: %v", err)
	}
	if strings.Contains(m.log(), "nonexistent") || strings.Contains(m.log(), s3.SecretKey) {
		t.Errorf("the log shows environment values or secrets:\n%s", m.log())
	}

	// A node drain's SIGTERM (and a stray SIGINT) must not cut the live mount.
	m.signal(syscall.SIGTERM)
	m.waitLog(`"Ignoring signal: mount-s3 keeps serving until the node plugin unmounts the volume" signal="terminated"`)
	m.signal(syscall.SIGINT)
	m.waitLog(`signal="interrupt"`)
	if !m.running() {
		t.Fatalf("the mounter exited on SIGTERM while serving; log:\n%s", m.log())
	}
	if b, err := os.ReadFile(filepath.Join(n.source, "written.bin")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read after SIGTERM: %d bytes, %v", len(b), err)
	}

	// Retirement: mount.exit, unmount → mount-s3 exits 0 → the mounter exits 0.
	n.retire()
	if code := m.exitCode(); code != 0 {
		t.Fatalf("exit status %d after a requested unmount, want 0; log:\n%s", code, m.log())
	}
	if _, err := os.Stat(n.path(mountoptions.ErrorFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount.err after a clean unmount: %v", err)
	}
	if cache := strings.TrimPrefix(ms3.args[7], "--cache="); cache != "" {
		if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cache directory %s left behind: %v", cache, err)
		}
	}
}

// TestBucketMissing: mount-s3 fails at start; its error reaches mount.err before the FUSE
// connection dies, and the mounter exits non-zero (the pod restarts).
func TestBucketMissing(t *testing.T) {
	s3 := harness.StartS3(t)
	n := newNode(t, s3)
	m := n.startMounter()
	if err := n.handOver("no-such-bucket", "--force-path-style", "--cache"); err != nil {
		t.Fatalf("hand-over: %v", err)
	}
	if code := m.exitCode(); code == 0 {
		t.Fatalf("exit status 0 after mount-s3 failed; log:\n%s", m.log())
	}
	// The cache stays in the pod's cache volume for the restarted container: what it holds
	// (here a marker) is there again for the next mount-s3.
	cache := filepath.Join(n.tmp, "mount-s3-cache")
	if err := os.WriteFile(filepath.Join(cache, "marker"), []byte("kept"), 0o644); err != nil {
		t.Fatalf("the cache directory did not outlive the failure: %v", err)
	}
	m2 := n.startMounter()
	if err := n.handOver("no-such-bucket", "--force-path-style", "--cache"); err != nil {
		t.Fatalf("second hand-over: %v", err)
	}
	if code := m2.exitCode(); code == 0 {
		t.Fatalf("exit status 0 after mount-s3 failed again; log:\n%s", m2.log())
	}
	if b, err := os.ReadFile(filepath.Join(cache, "marker")); err != nil || string(b) != "kept" {
		t.Errorf("the restarted container's cache lost what was there: %q %v", b, err)
	}
	b, err := os.ReadFile(n.path(mountoptions.ErrorFileName))
	if err != nil || !strings.Contains(string(b), "initial ListObjectsV2 failed for bucket no-such-bucket") {
		t.Fatalf("mount.err = %q, %v; want the stand-in's error", b, err)
	}
	fi, _ := os.Stat(n.path(mountoptions.ErrorFileName))
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o644 || st.Uid != podUID {
		t.Errorf("mount.err mode %v owner %d, want 0644 by %d", fi.Mode().Perm(), st.Uid, podUID)
	}
	// Nobody serves the mount any more: it answers with an error instead of hanging.
	if err := n.statSource(); err == nil {
		t.Fatal("stat of the abandoned mount succeeded")
	}
	if !strings.Contains(m.log(), "Wrote the error report for the node plugin") {
		t.Errorf("log lacks the error report step:\n%s", m.log())
	}
}

// TestStopWhileWaiting: a pod that never got a mount ends Succeeded when told to.
func TestStopWhileWaiting(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*node, *mounterProc)
	}{
		{"SIGTERM", func(_ *node, m *mounterProc) { m.signal(syscall.SIGTERM) }},
		{"SIGINT", func(_ *node, m *mounterProc) { m.signal(syscall.SIGINT) }},
		{"mount.exit", func(n *node, _ *mounterProc) {
			if err := os.WriteFile(n.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
				n.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, nil)
			m := n.startMounter()
			tc.stop(n, m)
			if code := m.exitCode(); code != 0 {
				t.Fatalf("exit status %d, want 0; log:\n%s", code, m.log())
			}
			if _, err := os.Stat(n.path(mountoptions.SocketName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket left behind: %v", err)
			}
		})
	}
	t.Run("mount.exit before start", func(t *testing.T) {
		n := newNode(t, nil)
		if err := os.WriteFile(n.path(mountoptions.ExitFileName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m := startMounter(t, n.comm, nil)
		if code := m.exitCode(); code != 0 {
			t.Fatalf("exit status %d, want 0; log:\n%s", code, m.log())
		}
		if !strings.Contains(m.log(), "Unmount requested before anything was mounted") {
			t.Errorf("log:\n%s", m.log())
		}
	})
}

// TestRefusedMessages: bad messages are answered with the reason and logged, leak no
// descriptor, and the mounter keeps waiting for a good one.
func TestRefusedMessages(t *testing.T) {
	s3 := harness.StartS3(t)
	const bucket = "bkt-refused"
	s3.CreateBucket(t, bucket)
	s3.PutObject(t, bucket, "ok", []byte("ok"))
	n := newNode(t, s3)
	m := n.startMounter()
	sock := n.path(mountoptions.SocketName)
	open := func(path string) int {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	valid := []byte(`{"bucketName":"` + bucket + `"}`)
	baseline := openFDs(t, m.pid())
	for _, tc := range []struct {
		name   string
		data   []byte
		fds    []int
		reason string
	}{
		{"malformed", []byte(`{"bucketName":`), []int{open("/dev/fuse")}, "malformed message"},
		{"unknown field", []byte(`{"bucketName":"` + bucket + `","fd":3}`), []int{open("/dev/fuse")}, `unknown field \"fd\"`},
		{"oversized", []byte(`{"bucketName":"` + bucket + `","args":["--` + strings.Repeat("x", 70<<10) + `"]}`), []int{open("/dev/fuse")}, "message too large"},
		{"zero fds", valid, nil, "no file descriptor"},
		{"two fds", valid, []int{open("/dev/fuse"), open("/dev/fuse")}, "more than one file descriptor: got 2"},
		{"not /dev/fuse", valid, []int{open("/dev/null")}, "the received descriptor is not /dev/fuse"},
	} {
		reply := rawSend(t, sock, tc.data, tc.fds...)
		if len(reply) == 0 || reply[0] != mountoptions.Nak || !strings.Contains(strconv.Quote(string(reply[1:])), tc.reason) {
			t.Errorf("%s: reply %q, want Nak with %q", tc.name, reply, tc.reason)
		}
		m.waitLog(tc.reason)
		if !m.running() {
			t.Fatalf("%s: the mounter exited; log:\n%s", tc.name, m.log())
		}
	}
	if got := openFDs(t, m.pid()); got != baseline {
		t.Errorf("the mounter has %d open descriptors after the refusals, %d before", got, baseline)
	}
	if got := strings.Count(m.log(), "Refused a mount options message, waiting for the next one"); got != 6 {
		t.Errorf("%d refusals logged, want 6", got)
	}

	// Still waiting: a good message is served.
	if err := n.handOver(bucket, "--allow-root", "--force-path-style"); err != nil {
		t.Fatalf("hand-over after refusals: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(n.source, "ok")); err != nil || string(b) != "ok" {
		t.Fatalf("read = %q, %v", b, err)
	}
	n.retire()
	if code := m.exitCode(); code != 0 {
		t.Fatalf("exit status %d, want 0; log:\n%s", code, m.log())
	}
}

// TestSocketPathTooLong: a comm directory whose socket path cannot be bound fails clearly.
func TestSocketPathTooLong(t *testing.T) {
	harness.RequireRoot(t)
	kubelet := harness.NewKubeletDir(t)
	comm := filepath.Join(kubelet, strings.Repeat("c", 110))
	mkdir(t, comm, 0o2770, podGID)
	m := startMounter(t, comm, nil)
	if code := m.exitCode(); code != 1 {
		t.Fatalf("exit status %d, want 1; log:\n%s", code, m.log())
	}
	if log := m.log(); !strings.Contains(log, "socket path too long") || !strings.Contains(log, "a Unix socket address holds at most 107") {
		t.Fatalf("log does not name the limit:\n%s", log)
	}
}
