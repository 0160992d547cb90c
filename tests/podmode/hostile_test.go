package podmode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestCompromisedMountpointPod: a Mountpoint Pod (uid 1000) that plants links in its comm
// directory — credentials/ leading to a directory of the host, mount.sock leading to another
// socket of the host — gets the node plugin (root) to write, chown or connect to nothing
// outside the comm directory: that volume's publish fails, the host's files are untouched, the
// other socket is never dialled, and the node keeps serving other volumes.
func TestCompromisedMountpointPod(t *testing.T) {
	n := newNode(t)
	victim := t.TempDir()
	harness.Must(t, os.WriteFile(filepath.Join(victim, "shadow"), []byte("root:x"), 0o600))
	before, err := os.Stat(victim)
	harness.Must(t, err)
	elsewhere := filepath.Join(t.TempDir(), "host.sock")
	l, err := net.Listen("unix", elsewhere)
	harness.Must(t, err)
	defer l.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			dialled <- struct{}{}
			c.Close()
		}
	}()
	scriptDir, err := os.MkdirTemp("", "compromised-") // not below t.TempDir (0700): the pod's user runs it
	harness.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(scriptDir) })
	harness.Must(t, os.Chmod(scriptDir, 0o755))
	script := filepath.Join(scriptDir, "compromised")
	harness.Must(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
# A compromised Mountpoint Pod: links in its comm directory lead out of it.
cd /comm || exit 1
ln -sfn %q credentials
ln -sfn %q mount.sock
exec sleep 3600
`, victim, elsewhere)), 0o755))
	n.mk.SetContainer(script)

	n.s3.CreateBucket(t, "hostile")
	pv := n.volume("hostile", "hostile", corev1.ReadWriteMany)
	w := n.workload("w", pv, nil)
	// Publish only once the pod has planted its links (a real attacker wins such races too).
	var comm string
	harness.Eventually(t, 30*time.Second, func() string {
		pods := n.mountpointPods()
		if len(pods) != 1 {
			return fmt.Sprintf("%d Mountpoint Pods", len(pods))
		}
		comm = filepath.Join(n.kubelet, "pods", string(pods[0].UID), "volumes", "kubernetes.io~empty-dir", "comm")
		for _, name := range []string{"credentials", "mount.sock"} {
			if st, err := os.Lstat(filepath.Join(comm, name)); err != nil || st.Mode()&os.ModeSymlink == 0 {
				return "links not planted yet"
			}
		}
		return ""
	})
	req := n.publishReq(w, pv, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = n.drv.Node.NodePublishVolume(ctx, req)
	if status.Code(err) == codes.OK {
		t.Fatal("publish through a compromised Mountpoint Pod succeeded")
	}
	t.Logf("publish refused: %v", err)

	// Nothing of the host was written, chowned or dialled.
	after, err := os.Stat(victim)
	harness.Must(t, err)
	if after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Gid != before.Sys().(*syscall.Stat_t).Gid {
		t.Errorf("the host directory changed: %v gid %d → %v gid %d", before.Mode(), before.Sys().(*syscall.Stat_t).Gid, after.Mode(), after.Sys().(*syscall.Stat_t).Gid)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 1 {
		t.Errorf("files written into the host directory: %v", entries)
	}
	// The socket link, reached with credentials as a real directory.
	harness.Must(t, os.Remove(filepath.Join(comm, "credentials")))
	_, err = n.drv.Node.NodePublishVolume(ctx, req)
	if status.Code(err) == codes.OK {
		t.Fatal("publish through a linked mount.sock succeeded")
	}
	t.Logf("publish refused: %v", err)
	select {
	case <-dialled:
		t.Error("the node plugin dialled the socket mount.sock links to")
	case <-time.After(200 * time.Millisecond):
	}
	if m := harness.MountsBelow(req.TargetPath); len(m) != 0 {
		t.Errorf("target mounted after a refused publish: %v", m)
	}
	if m := harness.MountsBelow(n.sourceRoot()); len(m) != 0 {
		t.Errorf("shared mount left after a refused publish: %v", m)
	}
	n.unpublish(req.TargetPath)

	// The node keeps serving other volumes.
	n.mk.SetContainer("")
	n.s3.CreateBucket(t, "honest")
	pv2 := n.volume("honest", "honest", corev1.ReadWriteMany)
	w2 := n.workload("w2", pv2, nil)
	target := n.publish(w2, pv2, false)
	harness.Must(t, os.WriteFile(filepath.Join(target, "ok"), []byte("ok"), 0o644))
	n.unpublish(target)
}
