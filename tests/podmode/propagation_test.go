package podmode

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

// mustMount runs mount(8) with args.
func mustMount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// TestRepairedTargetsStayApart: on a node whose kubelet directory is a shared mount (as on
// a real node: the host and the node plugin are peers, HostToContainer containers slaves), the
// targets of one Mountpoint Pod are repaired and unpublished independently: after mount-s3 died
// and each target was repaired by its republish, the unpublish of one workload leaves the
// other's mount live, on the node plugin's side, on the host's side and in its HostToContainer
// container, which saw the repair without a remount. With targets bound as peers of the shared
// mount, the unmount of one repaired target propagates to the others and takes their mount away.
func TestRepairedTargetsStayApart(t *testing.T) {
	n := newNode(t, "--health-check-interval=0") // repairs come from the republishes only
	// The kubelet directory is shared (the node plugin's Bidirectional mount of it): the shared
	// mounts at the plugin's source directory and every bind of them are shared too.
	mustMount(t, "--bind", n.kubelet, n.kubelet)
	mustMount(t, "--make-shared", n.kubelet)
	t.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", n.kubelet).Run() })
	// The host: another mount namespace, whose kubelet directory is a peer of the plugin's.
	hostNS := exec.Command("unshare", "--mount", "--propagation", "unchanged", "sleep", "600")
	harness.Must(t, hostNS.Start())
	t.Cleanup(func() { _ = hostNS.Process.Kill(); _ = hostNS.Wait() })
	onHost := func(path string) string { return fmt.Sprintf("/proc/%d/root%s", hostNS.Process.Pid, path) }
	inHost := func(script string) {
		t.Helper()
		if out, err := exec.Command("nsenter", "-t", strconv.Itoa(hostNS.Process.Pid), "-m", "--", "sh", "-ec", script).CombinedOutput(); err != nil {
			t.Fatalf("in the host's namespace: %s: %v %s", script, err, out)
		}
	}
	containerDir := t.TempDir() // b's HostToContainer container, in the host's namespace: a slave of b's target

	n.s3.CreateBucket(t, "pod-apart")
	pv := n.volume("apart", "pod-apart", "ReadWriteMany", "allow-delete")
	a, b := n.workload("a", pv, nil), n.workload("b", pv, nil)
	ta, tb := n.publish(a, pv, false), n.publish(b, pv, false)
	inHost(fmt.Sprintf("mount --bind %s %s && mount --make-slave %s", tb, containerDir, containerDir))
	container := onHost(containerDir)
	harness.Must(t, os.WriteFile(filepath.Join(ta, "before"), []byte("before"), 0o644))
	for _, p := range []string{ta, tb, onHost(ta), onHost(tb), container} {
		if err := harness.StatfsWithin(p, time.Second); err != nil {
			t.Fatalf("%s before the kill: %v", p, err)
		}
	}

	harness.Must(t, syscall.Kill(mountS3PID("pod-apart"), syscall.SIGKILL))
	harness.Eventually(t, 10*time.Second, func() string {
		if err := harness.StatfsWithin(container, time.Second); err == nil {
			return "the container's mount still answers"
		}
		return ""
	})
	// Each workload's republish repairs its target (kubelet republishes every pod).
	n.publish(a, pv, false)
	n.publish(b, pv, false)
	for _, p := range []string{ta, tb, onHost(ta), onHost(tb), container} {
		if err := harness.StatfsWithin(p, time.Second); err != nil {
			t.Errorf("%s after the repairs: %v", p, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(container, "before")); err != nil || string(got) != "before" {
		t.Errorf("the container reads %q, %v after the repair", got, err)
	}

	n.unpublish(ta)
	for _, p := range []string{tb, onHost(tb), container} {
		if err := harness.StatfsWithin(p, time.Second); err != nil {
			t.Errorf("%s after the other workload's unpublish: %v", p, err)
		}
	}
	harness.Must(t, os.WriteFile(filepath.Join(container, "after"), []byte("after"), 0o644))
	if !n.s3.ObjectExists(t, "pod-apart", "after") {
		t.Error("a write through the container after the other workload's unpublish did not land")
	}
	inHost("umount " + containerDir)
	n.unpublish(tb)
	for _, p := range []string{ta, tb} {
		if m := harness.MountsBelow(p); len(m) != 0 {
			t.Errorf("%s still mounted: %v", p, m)
		}
	}
}
