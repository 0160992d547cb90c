package podmode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func TestPublishWriteShareUnpublishRetire(t *testing.T) {
	n := newNode(t)
	n.s3.CreateBucket(t, "pod-data")
	fromS3 := []byte("put through the S3 API\n")
	n.s3.PutObject(t, "pod-data", "from-s3.txt", fromS3)
	pv := n.volume("data", "pod-data", corev1.ReadWriteMany, "allow-delete")
	a := n.workload("a", pv, nil)
	b := n.workload("b", pv, nil)

	ta := n.publish(a, pv, false)
	if got, err := os.ReadFile(filepath.Join(ta, "from-s3.txt")); err != nil || string(got) != string(fromS3) {
		t.Fatalf("read through the pod-mode mount: %q %v", got, err)
	}
	payload := []byte(strings.Repeat("pod mode payload ", 50000))
	harness.Must(t, os.WriteFile(filepath.Join(ta, "from-a.bin"), payload, 0o644))
	if got := n.s3.GetObject(t, "pod-data", "from-a.bin"); string(got) != string(payload) {
		t.Fatalf("object written through the mount differs (%d bytes, want %d)", len(got), len(payload))
	}

	// The second workload shares the Mountpoint Pod: one pod, one mounter start, one mount-s3.
	tb := n.publish(b, pv, false)
	if got, err := os.ReadFile(filepath.Join(tb, "from-a.bin")); err != nil || len(got) != len(payload) {
		t.Fatalf("second workload does not see the first one's file: %v", err)
	}
	mps := n.mountpointPods()
	if len(mps) != 1 {
		t.Fatalf("%d Mountpoint Pods, want 1 shared", len(mps))
	}
	mp := mps[0].Name
	if starts := n.mk.Starts(mp); starts != 1 {
		t.Errorf("mounter started %d times, want 1", starts)
	}
	if out, _ := exec.Command("pgrep", "-fc", "mount-s3 pod-data /dev/fd/3").Output(); strings.TrimSpace(string(out)) != "1" {
		t.Errorf("mount-s3 processes serving the bucket: %s, want 1", out)
	}
	if _, err := os.Stat(filepath.Join(n.sourceRoot(), mp)); err != nil {
		t.Fatalf("shared mount missing: %v", err)
	}

	// Unpublishing one workload leaves the other working.
	n.unpublish(ta)
	if _, err := os.Stat(ta); !os.IsNotExist(err) {
		t.Errorf("target of a not removed: %v", err)
	}
	harness.Must(t, os.WriteFile(filepath.Join(tb, "from-b.txt"), []byte("b"), 0o644))
	if !n.s3.ObjectExists(t, "pod-data", "from-b.txt") {
		t.Fatal("b's write did not reach the bucket after a's unpublish")
	}

	// The last one leaves: kubelet unpublishes, the pods go away, the controller retires the
	// Mountpoint Pod, the node unmounts it, the mounter exits 0, the pod and attachment go.
	n.unpublish(tb)
	harness.Must(t, kube.Client.Delete(context.Background(), a, client.GracePeriodSeconds(0)))
	harness.Must(t, kube.Client.Delete(context.Background(), b, client.GracePeriodSeconds(0)))
	harness.Eventually(t, 30*time.Second, func() string {
		if m := harness.MountsBelow(n.sourceRoot()); len(m) > 0 {
			return fmt.Sprintf("shared mount still mounted: %v", m)
		}
		if p := n.mountpointPods(); len(p) != 0 {
			return fmt.Sprintf("Mountpoint Pod still exists (phase %s, annotations %v)", p[0].Status.Phase, p[0].Annotations)
		}
		if a := n.attachments(); len(a) != 0 {
			return "attachment still exists"
		}
		return ""
	})
	if proc := n.mk.Mounter(mp); proc != nil && proc.ExitCode() != 0 {
		t.Errorf("mounter exit code %d, want 0", proc.ExitCode())
	}
	if _, err := os.Stat(filepath.Join(n.sourceRoot(), mp)); !os.IsNotExist(err) {
		t.Errorf("source directory left: %v", err)
	}
}

func TestReadOnlyAndFSGroup(t *testing.T) {
	n := newNode(t)
	n.s3.CreateBucket(t, "pod-ro")
	n.s3.PutObject(t, "pod-ro", "r.txt", []byte("r"))

	// A ReadOnlyMany volume: read-only for everybody.
	rox := n.volume("rox", "pod-ro", corev1.ReadOnlyMany)
	w := n.workload("rox-reader", rox, nil)
	tr := n.publish(w, rox, false)
	if err := os.WriteFile(filepath.Join(tr, "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write on a ReadOnlyMany volume: %v, want EROFS", err)
	}

	// One workload read-write, one read-only on the same shared mount.
	rwx := n.volume("rwx", "pod-ro", corev1.ReadWriteMany, "allow-overwrite")
	writer := n.workload("writer", rwx, ptr.To[int64](1234))
	reader := n.workload("reader", rwx, ptr.To[int64](1234))
	tw := n.publish(writer, rwx, false)
	trd := n.publish(reader, rwx, true)
	if len(n.mountpointPods()) != 2 {
		t.Fatalf("%d Mountpoint Pods, want 2 (rox and rwx)", len(n.mountpointPods()))
	}
	if err := os.WriteFile(filepath.Join(trd, "y"), []byte("y"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through the read-only publish: %v, want EROFS", err)
	}
	// Read-only binds keep the FUSE mount's nosuid and nodev (a read-only remount of a bind
	// resets every per-mount flag it is not given).
	entries, err := mounttable.Table{}.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{tr, trd} {
		seen := 0
		for _, e := range entries {
			if e.MountPoint != target {
				continue
			}
			seen++
			for _, want := range []string{"ro", "nosuid", "nodev"} {
				if !slices.Contains(strings.Split(e.MountOptions, ","), want) {
					t.Errorf("the read-only publish at %s is mounted %q, want %s", target, e.MountOptions, want)
				}
			}
		}
		if seen == 0 {
			t.Errorf("nothing mounted at the read-only publish %s", target)
		}
	}
	// fsGroup: a member of group 1234 can write, others cannot even list.
	asUser := func(gid uint32, script string) error {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 2000, Gid: gid}}
		if out, err := cmd.CombinedOutput(); err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := asUser(1234, "echo member > "+tw+"/by-member"); err != nil {
		t.Fatalf("fsGroup member cannot write: %v", err)
	}
	if !n.s3.ObjectExists(t, "pod-ro", "by-member") {
		t.Fatal("member's write did not reach the bucket")
	}
	if err := asUser(999, "ls "+tw); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("non-member listed the volume: %v", err)
	}
}

func TestMountFailureCarriesMountErr(t *testing.T) {
	n := newNode(t)
	pv := n.volume("missing", "no-such-bucket", corev1.ReadWriteMany)
	w := n.workload("w", pv, nil)
	req := n.publishReq(w, pv, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := n.drv.Node.NodePublishVolume(ctx, req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), "ListObjectsV2") {
		t.Fatalf("err = %v, want Internal quoting mount-s3's error from mount.err", err)
	}
	if m := harness.MountsBelow(n.kubelet + "/pods/" + string(w.UID)); len(m) != 0 {
		t.Errorf("target mounted after a failed publish: %v", m)
	}
	if m := harness.MountsBelow(n.sourceRoot()); len(m) != 0 {
		t.Errorf("shared mount left after a failed publish: %v", m)
	}
	if _, err := os.Stat(req.TargetPath); !os.IsNotExist(err) {
		t.Errorf("target directory left: %v", err)
	}
}

func TestDriverRestartBetweenMountAndUnmount(t *testing.T) {
	n := newNode(t)
	n.s3.CreateBucket(t, "restart")
	pv := n.volume("restart", "restart", corev1.ReadWriteMany)
	w := n.workload("w", pv, nil)
	target := n.publish(w, pv, false)
	n.drv.Kill()
	n.drv.Restart()
	harness.Must(t, os.WriteFile(filepath.Join(target, "after-restart"), []byte("ok"), 0o644))
	n.unpublish(target)
	harness.Must(t, kube.Client.Delete(context.Background(), w, client.GracePeriodSeconds(0)))
	harness.Eventually(t, 30*time.Second, func() string {
		if m := harness.MountsBelow(n.sourceRoot()); len(m) > 0 {
			return fmt.Sprintf("shared mount still mounted: %v", m)
		}
		if len(n.mountpointPods()) != 0 || len(n.attachments()) != 0 {
			return "Mountpoint Pod or attachment still exists"
		}
		return ""
	})
}

func TestStaleSourceDirectoriesAreSwept(t *testing.T) {
	n := newNode(t, "--pod-sweep-interval=1s")
	stale := filepath.Join(n.sourceRoot(), "mp-gone")
	harness.Must(t, os.MkdirAll(stale, 0o755))
	// A leftover mount too (a tmpfs standing in for a FUSE mount whose pod is gone).
	harness.Must(t, exec.Command("mount", "-t", "tmpfs", "tmpfs", stale).Run())
	harness.Eventually(t, 10*time.Second, func() string {
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			return fmt.Sprintf("stale source %s still there (%v)", stale, harness.MountsBelow(stale))
		}
		return ""
	})
}

func TestTimeoutsSayWhatIsMissing(t *testing.T) {
	n := newNode(t)
	pv := n.volume("wait", "wait-bucket", corev1.ReadWriteMany)

	// No controller: no attachment ever comes.
	n.ctrl.Stop()
	w := n.workload("orphan", pv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	_, err := n.drv.Node.NodePublishVolume(ctx, n.publishReq(w, pv, false))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no MountpointS3PodAttachment") || !strings.Contains(err.Error(), "controller") {
		t.Fatalf("err = %v, want DeadlineExceeded pointing at the controller", err)
	}

	// The Mountpoint Pod exists but the scheduler finds no room for it.
	n.ctrl.Start()
	n.mk.SetPaused(true)
	other := n.volume("unsched", "wait-bucket", corev1.ReadWriteMany)
	w2 := n.workload("unsched", other, nil)
	var mp corev1.Pod
	harness.Eventually(t, 10*time.Second, func() string {
		for _, p := range n.mountpointPods() {
			if p.Annotations[podcontract.AnnotationVolumeName] == other.Name {
				mp = p
				return ""
			}
		}
		return "no Mountpoint Pod for the volume"
	})
	mp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory"}}
	harness.Must(t, kube.Client.Status().Update(context.Background(), &mp))
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
	_, err = n.drv.Node.NodePublishVolume(ctx, n.publishReq(w2, other, false))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), mp.Name) || !strings.Contains(err.Error(), "Unschedulable") || !strings.Contains(err.Error(), "Insufficient memory") {
		t.Fatalf("err = %v, want DeadlineExceeded naming the pod and why it is not scheduled", err)
	}
	// Once there is room, the same publish succeeds.
	n.mk.SetPaused(false)
	n.s3.CreateBucket(t, "wait-bucket")
	n.publish(w2, other, false)
}

func TestPublishNeedsWorkloadIdentity(t *testing.T) {
	n := newNode(t)
	pv := n.volume("anon", "anon-bucket", corev1.ReadWriteMany)
	w := n.workload("w", pv, nil)
	req := n.publishReq(w, pv, false)
	delete(req.VolumeContext, "csi.storage.k8s.io/pod.uid")
	req.TargetPath = filepath.Join(n.kubelet, "pods", "no-layout", "target")
	_, err := n.drv.Node.NodePublishVolume(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod UID") {
		t.Fatalf("err = %v, want InvalidArgument about the missing pod UID", err)
	}
}

// TestCustomCABundle: the Mountpoint Pod's mount-s3 trusts the private CA of an HTTPS endpoint
// through the bundle the node plugin writes into the pod's comm directory (AWS_CA_BUNDLE,
// mount-s3's --ca-bundle: the bundle alone is trusted); with a bundle of another CA the publish
// fails with mount-s3's TLS error (the CRT's, which names no certificate) and the driver's hint
// naming the CA bundle.
func TestCustomCABundle(t *testing.T) {
	n := newNodeWith(t, harness.S3Options{TLS: true})
	n.s3.CreateBucket(t, "pod-tls")
	pv := n.volume("tls", "pod-tls", corev1.ReadWriteMany)

	right := n.drv
	right.Stop()
	n.drv = n.startDriver("--s3-ca-bundle=" + harness.UnrelatedCA(t))
	bad := n.workload("bad", pv, nil)
	// mount-s3 retries the TLS failure ten times with full-jitter backoff (CONFORMANCE.md X3: up
	// to about 90 s, half that on average) before it fails.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := n.drv.Node.NodePublishVolume(ctx, n.publishReq(bad, pv, false)); err == nil || !strings.Contains(err.Error(), "TLS (SSL) negotiation failed") ||
		!strings.Contains(err.Error(), "not signed by a CA in the bundle mount-s3 trusts (the node plugin's --s3-ca-bundle") {
		t.Fatalf("publish with another CA's bundle: %v, want mount-s3's TLS error and the hint naming --s3-ca-bundle", err)
	}
	n.drv.Stop()
	n.drv = n.startDriver("--s3-ca-bundle=" + n.s3.CABundle)

	w := n.workload("w", pv, nil)
	target := n.publish(w, pv, false)
	harness.Must(t, os.WriteFile(filepath.Join(target, "over-tls"), []byte("tls"), 0o644))
	if got := n.s3.GetObject(t, "pod-tls", "over-tls"); string(got) != "tls" {
		t.Fatalf("object = %q", got)
	}
	n.unpublish(target)
}

// TestAttachmentWaitIsBounded: a publish whose workload the controller never attaches (the pod
// was deleted meanwhile, say) fails after --attachment-wait, not at kubelet's own deadline (two
// minutes, during which kubelet holds every other operation on the volume), and says what is
// missing; the Mountpoint Pod's own start still has the whole deadline.
func TestAttachmentWaitIsBounded(t *testing.T) {
	n := newNode(t, "--attachment-wait=2s")
	pv := n.volume("gone", "gone-bucket", corev1.ReadWriteMany)
	n.ctrl.Stop() // no attachment ever comes
	w := n.workload("gone", pv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := n.drv.Node.NodePublishVolume(ctx, n.publishReq(w, pv, false))
	took := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no MountpointS3PodAttachment") {
		t.Fatalf("err = %v, want DeadlineExceeded saying no attachment came", err)
	}
	if took < 2*time.Second || took > 20*time.Second {
		t.Errorf("the publish failed after %v, want about --attachment-wait (2s)", took)
	}
}

// TestSessionACLOfTheMountpointPod (CONFORMANCE.md rows A2-A4, M7): mount-s3 runs as uid 1000
// in the Mountpoint Pod, so its FUSE session answers only uid 1000 unless told otherwise. The
// node plugin sends --allow-root unless the volume asks for --allow-other (an fsGroup does), and
// never --read-only: root (kubelet, the node plugin's checks, root containers) reads and writes
// every volume; a non-root uid needs an fsGroup (or allow-other); read-only volumes refuse
// writes in the kernel.
func TestSessionACLOfTheMountpointPod(t *testing.T) {
	n := newNode(t)
	n.s3.CreateBucket(t, "acl")
	n.s3.PutObject(t, "acl", "seed", []byte("seed"))
	as := func(uid, gid uint32, script string) error {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	mustRead := func(who, target string, uid, gid uint32) {
		t.Helper()
		if err := as(uid, gid, "cat "+target+"/seed"); err != nil {
			t.Errorf("%s reading %s: %v", who, target, err)
		}
	}
	mustBeDenied := func(who, target string, uid, gid uint32) {
		t.Helper()
		if err := as(uid, gid, "ls "+target); err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("%s listing %s: %v, want Permission denied", who, target, err)
		}
	}

	// No fsGroup: root only.
	plain := n.volume("acl-plain", "acl", corev1.ReadWriteMany)
	tp := n.publish(n.workload("acl-plain", plain, nil), plain, false)
	mustRead("root", tp, 0, 0)
	if err := as(0, 0, "echo root > "+tp+"/by-root"); err != nil || !n.s3.ObjectExists(t, "acl", "by-root") {
		t.Errorf("root writing without an fsGroup: %v", err)
	}
	mustBeDenied("uid 2000 without an fsGroup", tp, 2000, 2000)

	// fsGroup 1234: root, and members of the group.
	grouped := n.volume("acl-group", "acl", corev1.ReadWriteMany)
	tg := n.publish(n.workload("acl-group", grouped, ptr.To[int64](1234)), grouped, false)
	mustRead("root", tg, 0, 0)
	mustRead("uid 2000 in the fsGroup", tg, 2000, 1234)
	if err := as(2000, 1234, "echo member > "+tg+"/by-member"); err != nil || !n.s3.ObjectExists(t, "acl", "by-member") {
		t.Errorf("fsGroup member writing: %v", err)
	}
	mustBeDenied("uid 2000 outside the fsGroup", tg, 2000, 999)

	// allow-other without an fsGroup: everyone the file modes let in.
	open := n.volume("acl-other", "acl", corev1.ReadWriteMany, "allow-other", "file-mode=644", "dir-mode=755")
	to := n.publish(n.workload("acl-other", open, nil), open, false)
	mustRead("root", to, 0, 0)
	mustRead("uid 2000 with allow-other", to, 2000, 2000)

	// Read-only volume without an fsGroup: root reads, nobody writes.
	ro := n.volume("acl-ro", "acl", corev1.ReadOnlyMany)
	tr := n.publish(n.workload("acl-ro", ro, nil), ro, false)
	mustRead("root", tr, 0, 0)
	if err := as(0, 0, "echo x > "+tr+"/by-root-ro"); err == nil || !strings.Contains(err.Error(), "Read-only file system") {
		t.Errorf("root writing to a ReadOnlyMany volume: %v, want Read-only file system", err)
	}
	for _, target := range []string{tp, tg, to, tr} {
		n.unpublish(target)
	}
}
