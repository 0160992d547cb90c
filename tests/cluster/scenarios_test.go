package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testInstall installs the chart as docs/install.md says and checks what the docs say to
// check: both rollouts done, the driver registered in the node's CSINode by the node plugin
// itself (node.registration=builtin: no sidecars), a clean start-up log.
func testInstall(t *testing.T) {
	installChart(t)
	harness.Eventually(t, time.Minute, func() string {
		out, err := kubectl(t, "get", "csinode", rig.NodeName, "-o", "jsonpath={.spec.drivers[*].name}")
		if err != nil || strings.TrimSpace(out) != driverName {
			return fmt.Sprintf("CSINode drivers %q (%v), want %s", out, err, driverName)
		}
		return ""
	})
	logs := mustRun(t)(kubectl(t, "-n", releaseNS, "logs", "ds/s3-csi-node", "-c", "s3-plugin"))
	for _, want := range []string{"Node plugin ready", "Registered with kubelet"} {
		if !strings.Contains(logs, want) {
			t.Errorf("node plugin log lacks %q:\n%s", want, logs)
		}
	}
	for _, bad := range []string{"was never called", "goroutine "} {
		if strings.Contains(logs, bad) {
			t.Errorf("node plugin log holds %q (a stack trace at start):\n%s", bad, logs)
		}
	}
	pods := mustRun(t)(kubectl(t, "-n", releaseNS, "get", "pods", "-l", "app=s3-csi-node", "-o", "jsonpath={.items[*].spec.containers[*].name}"))
	if strings.TrimSpace(pods) != "s3-plugin" {
		t.Errorf("node plugin containers %q, want s3-plugin only (built-in registration and liveness)", pods)
	}
}

// testStatic mounts a static volume in one mode: a workload reads an object put through S3,
// writes a file that appears in the bucket byte for byte, a second workload shares the volume,
// and deleting them leaves nothing on the node.
func testStatic(t *testing.T, mode string) {
	setMode(t, mode)
	ns := newNamespace(t, "static-"+mode)
	bucket := "static-" + mode + "-" + suffix()
	env.s3.CreateBucket(t, bucket)
	env.s3.PutObject(t, bucket, "from-s3.txt", []byte("put through S3\n"))
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	a := workload(t, ns, "a", claim, podOpts{})
	b := workload(t, ns, "b", claim, podOpts{})
	waitRunning(t, 2*time.Minute, a, b)
	if out := mustRun(t)(execIn(t, a, "cat /data/from-s3.txt")); out != "put through S3\n" {
		t.Errorf("object read through the mount = %q", out)
	}
	mustRun(t)(execIn(t, a, "printf 'written by a\\n' > /data/a.txt"))
	if got := string(env.s3.GetObject(t, bucket, "a.txt")); got != "written by a\n" {
		t.Errorf("object written through the mount = %q", got)
	}
	if out := mustRun(t)(execIn(t, b, "cat /data/a.txt")); out != "written by a\n" {
		t.Errorf("second workload reads %q", out)
	}
	st := currentState(t)
	switch mode {
	case "systemd":
		if len(st.units) != 2 || len(st.mpPods) != 0 {
			t.Errorf("systemd mode: want two mount units and no Mountpoint Pod: %s", st)
		}
		// The descriptor hand-over (the node's systemd is 252): each mount-s3 serves the
		// connection scality-fuse-helper mounted, with no capability.
		for _, unit := range st.units {
			pid, err := rig.Systemctl("show", "-p", "MainPID", "--value", unit)
			harness.Must(t, err)
			pid = strings.TrimSpace(pid)
			status, _ := os.ReadFile(filepath.Join("/proc", pid, "status"))
			cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			if !strings.Contains(string(status), "CapBnd:\t0000000000000000\n") || !strings.HasSuffix(string(cmdline), "\x00/dev/fd/3\x00") {
				t.Errorf("unit %s: mount-s3 (pid %s, %q) does not serve a handed-over /dev/fd/3 without capabilities:\n%s", unit, pid, cmdline, status)
			}
			// As the chart's node.mountS3User, which the first mount created on the node.
			if uid := mountS3UID(t); !strings.Contains(string(status), fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d\n", uid)) {
				t.Errorf("unit %s: mount-s3 (pid %s) does not run as s3csi-mount (uid %d):\n%s", unit, pid, uid, status)
			}
		}
	case "pod":
		if len(st.units) != 0 || len(st.mpPods) != 1 || len(st.attachments) != 1 {
			t.Errorf("pod mode: want one shared Mountpoint Pod and attachment, no unit: %s", st)
		}
		// The chart's default requests (mountpointPod.resources) keep it out of BestEffort.
		var pods corev1.PodList
		harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(mpNamespace)))
		for _, p := range pods.Items {
			if p.Status.QOSClass != corev1.PodQOSBurstable {
				t.Errorf("Mountpoint Pod %s is %s, want Burstable (requests %v)", p.Name, p.Status.QOSClass, p.Spec.Containers[0].Resources.Requests)
			}
			// The chart's mountpointPod.cacheSizeLimit bounds its cache volume.
			if v := p.Spec.Volumes[1]; v.Name != "tmp" || v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "5Gi" {
				t.Errorf("Mountpoint Pod %s: cache volume %+v, want an emptyDir limited to 5Gi", p.Name, v)
			}
		}
	}
	deletePods(t, a, b)
	expectClean(t)
}

// testMixed runs two modes on the node over time: a workload mounted in systemd mode keeps its
// mount when the node moves to pod mode, where a second workload of the same volume mounts
// through a Mountpoint Pod; both see each other's writes; unpublishing each goes to the mode
// that made it.
func testMixed(t *testing.T) {
	setMode(t, "systemd")
	ns := newNamespace(t, "mixed")
	bucket := "mixed-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	sys := workload(t, ns, "sys", claim, podOpts{})
	waitRunning(t, 2*time.Minute, sys)
	setMode(t, "pod")
	pod := workload(t, ns, "pod", claim, podOpts{})
	waitRunning(t, 2*time.Minute, pod)
	st := currentState(t)
	if len(st.units) != 1 || len(st.mpPods) != 1 {
		t.Fatalf("want one systemd unit (first workload) and one Mountpoint Pod (second): %s", st)
	}
	mustRun(t)(execIn(t, sys, "printf 'from systemd\\n' > /data/sys.txt"))
	mustRun(t)(execIn(t, pod, "printf 'from pod\\n' > /data/pod.txt"))
	if out := mustRun(t)(execIn(t, pod, "cat /data/sys.txt")); out != "from systemd\n" {
		t.Errorf("pod-mode workload reads %q", out)
	}
	if out := mustRun(t)(execIn(t, sys, "cat /data/pod.txt")); out != "from pod\n" {
		t.Errorf("systemd-mode workload reads %q", out)
	}
	// Back to systemd: the pod-mode mount stays until its workload goes, and is cleaned up by
	// pod mode then.
	setMode(t, "systemd")
	deletePods(t, pod)
	harness.Eventually(t, time.Minute, func() string {
		if st := currentState(t); len(st.mpPods) != 0 || len(st.units) != 1 {
			return "after the pod-mode workload left: " + st.String()
		}
		return ""
	})
	deletePods(t, sys)
	expectClean(t)
}

// writerScript writes files <name>-<n> (n = 1, 2, ...) with known content into /data until
// SIGTERM, then prints how many it wrote completely; the trap runs between commands, so the
// last file is whole.
func writerScript(name string) string {
	return fmt.Sprintf(`i=0; trap 'echo "wrote=$i"; exit 0' TERM
while true; do n=$((i+1)); printf '%s-%%06d-0123456789abcdefghijklmnopqrstuvwxyz\n' $n > /data/%s-$n || { echo "write $n failed"; exit 1; }; i=$n; sleep 0.2; done`, name, name)
}

// stopWriter stops a writer pod and returns how many files it wrote (from its log).
func stopWriter(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	deletePodsKeepLog := func() string {
		var out string
		harness.Must(t, env.c.Delete(context.Background(), p, client.GracePeriodSeconds(10)))
		harness.Eventually(t, time.Minute, func() string {
			var err error
			out, err = kubectl(t, "-n", p.Namespace, "logs", p.Name)
			if err == nil && strings.Contains(out, "wrote=") {
				return ""
			}
			return fmt.Sprintf("writer %s has not reported yet: %q %v", p.Name, out, err)
		})
		return out
	}
	out := deletePodsKeepLog()
	if strings.Contains(out, "failed") {
		t.Errorf("writer %s: %s", p.Name, out)
	}
	i := strings.LastIndex(out, "wrote=")
	n, err := strconv.Atoi(strings.TrimSpace(out[i+len("wrote="):]))
	if err != nil {
		t.Fatalf("writer %s log %q: %v", p.Name, out, err)
	}
	deletePods(t, p)
	return n
}

// checkWriter checks that every file a writer reported is in the bucket, byte for byte.
func checkWriter(t *testing.T, bucket, name string, n int) {
	t.Helper()
	if n < 5 {
		t.Errorf("writer %s wrote only %d files", name, n)
	}
	keys := env.s3.ListKeys(t, bucket)
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("%s-%d", name, i)
		if !slices.Contains(keys, key) {
			t.Errorf("object %s missing (writer %s wrote %d)", key, name, n)
			continue
		}
		want := fmt.Sprintf("%s-%06d-0123456789abcdefghijklmnopqrstuvwxyz\n", name, i)
		if got := string(env.s3.GetObject(t, bucket, key)); got != want {
			t.Errorf("object %s = %q, want %q", key, got, want)
		}
	}
}

// testMigration moves the node systemd→pod→systemd while writers keep writing: a writer
// started in each mode (the first one running through both switches), every byte they wrote
// checked in the bucket, nothing left at the end.
func testMigration(t *testing.T) {
	setMode(t, "systemd")
	ns := newNamespace(t, "migration")
	bucket := "migration-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	w1 := workload(t, ns, "w1", claim, podOpts{command: writerScript("w1")})
	waitRunning(t, 2*time.Minute, w1)
	time.Sleep(2 * time.Second)
	setMode(t, "pod")
	w2 := workload(t, ns, "w2", claim, podOpts{command: writerScript("w2")})
	waitRunning(t, 2*time.Minute, w2)
	time.Sleep(2 * time.Second)
	setMode(t, "systemd")
	w3 := workload(t, ns, "w3", claim, podOpts{command: writerScript("w3")})
	waitRunning(t, 2*time.Minute, w3)
	time.Sleep(2 * time.Second)
	st := currentState(t)
	if len(st.units) != 2 || len(st.mpPods) != 1 {
		t.Errorf("want two systemd mounts (w1, w3) and one Mountpoint Pod (w2): %s", st)
	}
	counts := map[string]int{}
	for _, w := range []*corev1.Pod{w1, w2, w3} {
		counts[w.Name] = stopWriter(t, w)
	}
	for name, n := range counts {
		checkWriter(t, bucket, name, n)
	}
	t.Logf("files written and checked: %v", counts)
	expectClean(t)
}

// testDynamic provisions a bucket per claim with each bucketDeletionPolicy and checks what
// deleting the claim does to the bucket.
func testDynamic(t *testing.T) {
	setMode(t, "systemd")
	ns := newNamespace(t, "dynamic")
	ctx := context.Background()
	for _, policy := range []string{"delete", "deleteWithObjects", "retain"} {
		t.Run(policy, func(t *testing.T) {
			prefix := "dyn-" + strings.ToLower(policy) + "-"
			sc := &storagev1.StorageClass{
				ObjectMeta:    metav1.ObjectMeta{Name: ns + "-" + strings.ToLower(policy)},
				Provisioner:   driverName,
				Parameters:    map[string]string{"bucketDeletionPolicy": policy, "bucketNamePrefix": prefix},
				ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
				MountOptions:  []string{"allow-delete"},
			}
			harness.Must(t, env.c.Create(ctx, sc))
			t.Cleanup(func() { _ = env.c.Delete(context.Background(), sc) })
			pvc := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(policy), Namespace: ns},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(sc.Name),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			harness.Must(t, env.c.Create(ctx, pvc))
			waitBound(t, pvc) // before its pod exists (waitBound says why)
			p := workload(t, ns, "w-"+strings.ToLower(policy), pvc.Name, podOpts{command: "printf 'kept?\\n' > /data/obj.txt && " + idle})
			waitRunning(t, 2*time.Minute, p)
			harness.Must(t, env.c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
			pvName := pvc.Spec.VolumeName
			var pv corev1.PersistentVolume
			harness.Must(t, env.c.Get(ctx, client.ObjectKey{Name: pvName}, &pv))
			bucket := pv.Spec.CSI.VolumeAttributes["bucketName"]
			if !strings.HasPrefix(bucket, prefix) || !env.s3.ObjectExists(t, bucket, "obj.txt") {
				t.Fatalf("bucket %q (of PV %s) lacks the workload's object", bucket, pvName)
			}
			deletePods(t, p)
			harness.Must(t, env.c.Delete(ctx, pvc))
			switch policy {
			case "delete":
				// A non-empty bucket is kept and the PV stays Released, retrying, until the
				// bucket is emptied; then it goes.
				harness.Eventually(t, time.Minute, func() string {
					var ev corev1.EventList
					_ = env.c.List(ctx, &ev)
					for _, e := range ev.Items {
						if e.InvolvedObject.Name == pvName && strings.Contains(e.Message, "still holds objects") {
							return ""
						}
					}
					return "no event says the bucket still holds objects"
				})
				if !env.s3.BucketExists(t, bucket) {
					t.Fatal("a non-empty bucket was deleted with policy delete")
				}
				env.s3.DeleteObject(t, bucket, "obj.txt")
				waitPVGone(t, pvName)
				if env.s3.BucketExists(t, bucket) {
					t.Error("the emptied bucket was not deleted")
				}
			case "deleteWithObjects":
				waitPVGone(t, pvName)
				if env.s3.BucketExists(t, bucket) {
					t.Error("bucket kept with policy deleteWithObjects")
				}
			case "retain":
				waitPVGone(t, pvName)
				if !env.s3.ObjectExists(t, bucket, "obj.txt") {
					t.Error("bucket or object gone with policy retain")
				}
			}
		})
	}
	expectClean(t)
}

func waitPVGone(t *testing.T, name string) {
	t.Helper()
	harness.Eventually(t, 2*time.Minute, func() string {
		err := env.c.Get(context.Background(), client.ObjectKey{Name: name}, &corev1.PersistentVolume{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("PV %s still exists (%v)", name, err)
	})
}

// testFSGroupReadOnly checks, in one mode, that a workload's fsGroup owns what it writes (as a
// non-root user), that a non-root user without an fsGroup is refused (mount-s3 admits root, and
// in pod mode its own user, only: CONFORMANCE.md rows A2-A4), that a read-only volumeMount and a
// ReadOnlyMany volume refuse writes, and that the data stays readable.
func testFSGroupReadOnly(t *testing.T, mode string) {
	setMode(t, mode)
	ns := newNamespace(t, "fsg-"+mode)
	bucket := "fsg-" + mode + "-" + suffix()
	env.s3.CreateBucket(t, bucket)
	env.s3.PutObject(t, bucket, "seed.txt", []byte("seed\n"))
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	roClaim := staticVolume(t, ns, "ro", bucket, volumeOpts{accessMode: corev1.ReadOnlyMany})
	fsg := workload(t, ns, "fsgroup", claim, podOpts{fsGroup: ptr.To[int64](3000), runAsUser: ptr.To[int64](1000)})
	ro := workload(t, ns, "readonly", claim, podOpts{readOnly: true})
	rox := workload(t, ns, "rox", roClaim, podOpts{})
	stranger := workload(t, ns, "no-fsgroup", claim, podOpts{runAsUser: ptr.To[int64](2000)})
	waitRunning(t, 2*time.Minute, fsg, ro, rox, stranger)
	if out, err := execIn(t, stranger, "ls /data"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 2000 without an fsGroup listed the volume (%v): %s", err, out)
	}
	mustRun(t)(execIn(t, fsg, "printf 'by fsgroup\\n' > /data/fsg.txt"))
	if out := mustRun(t)(execIn(t, fsg, "stat -c '%g' /data/fsg.txt")); strings.TrimSpace(out) != "3000" {
		t.Errorf("file group %q, want the fsGroup 3000", out)
	}
	for _, p := range []*corev1.Pod{ro, rox} {
		if out, err := execIn(t, p, "printf x > /data/ro-"+p.Name+".txt"); err == nil {
			t.Errorf("%s: a write to a read-only volume succeeded: %s", p.Name, out)
		} else if !strings.Contains(out, "Read-only file system") {
			t.Errorf("%s: write refused with %q, want EROFS", p.Name, out)
		}
		if out := mustRun(t)(execIn(t, p, "cat /data/seed.txt")); out != "seed\n" {
			t.Errorf("%s reads %q", p.Name, out)
		}
	}
	if env.s3.ObjectExists(t, bucket, "ro-readonly.txt") || env.s3.ObjectExists(t, bucket, "ro-rox.txt") {
		t.Error("a read-only workload's write reached the bucket")
	}
	deletePods(t, fsg, ro, rox, stranger)
	expectClean(t)
}

// credentialFiles returns the content of every AWS credentials file the driver wrote on the
// node for live mounts (systemd mode's credentials directory on /run, pod mode's comm
// directories).
func credentialFiles(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	for _, pattern := range []string{
		filepath.Join("/run", driverName, "*", "credentials"), // the chart's --systemd-credentials-dir
		filepath.Join(rig.KubeletDir, "pods", "*", "volumes", "kubernetes.io~empty-dir", "comm", "credentials", "credentials"),
	} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			all.Write(b)
		}
	}
	return all.String()
}

// testRotation mounts a volume whose credentials come from a Secret (authenticationSource:
// secret) in both modes, replaces the Secret's keys with another account's, and waits for
// kubelet's periodic republish to put the new keys where mount-s3 reads them.
func testRotation(t *testing.T) {
	ns := newNamespace(t, "rotation")
	ctx := context.Background()
	bucket := "rotation-" + suffix()
	env.s3.CreateBucket(t, bucket)
	oldKey, newKey := "ROTOLD"+strings.ToUpper(suffix()), "ROTNEW"+strings.ToUpper(suffix())
	oldSecret, newSecret := "old-secret-"+suffix(), "new-secret-"+suffix()
	env.s3.CreateUser(t, oldKey, oldSecret, "admin")
	env.s3.CreateUser(t, newKey, newSecret, "admin")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vol-creds", Namespace: ns},
		StringData: map[string]string{"access_key_id": oldKey, "secret_access_key": oldSecret}}
	harness.Must(t, env.c.Create(ctx, secret))
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{attributes: map[string]string{"authenticationSource": "secret"},
		secretRef: &corev1.SecretReference{Name: "vol-creds", Namespace: ns}})
	var pods []*corev1.Pod
	for _, mode := range []string{"systemd", "pod"} {
		setMode(t, mode)
		p := workload(t, ns, "w-"+mode, claim, podOpts{})
		waitRunning(t, 2*time.Minute, p)
		pods = append(pods, p)
	}
	if got := credentialFiles(t); strings.Count(got, oldKey) != 2 {
		t.Fatalf("want the old key in both mounts' credential files, got:\n%s", got)
	}
	secret.StringData = map[string]string{"access_key_id": newKey, "secret_access_key": newSecret}
	harness.Must(t, env.c.Update(ctx, secret))
	start := time.Now()
	harness.Eventually(t, 3*time.Minute, func() string {
		got := credentialFiles(t)
		if strings.Count(got, newKey) == 2 && !strings.Contains(got, oldKey) {
			return ""
		}
		return fmt.Sprintf("credential files not rotated yet:\n%s", got)
	})
	t.Logf("both mounts' credentials rotated %.0fs after the Secret changed (kubelet's republish)", time.Since(start).Seconds())
	if strings.Contains(credentialFiles(t), oldSecret) {
		t.Error("an old secret key is still on the node")
	}
	for _, p := range pods {
		mustRun(t)(execIn(t, p, "printf ok > /data/"+p.Name))
	}
	deletePods(t, pods...)
	expectClean(t)
}

// testNodePluginRestart restarts the node plugin while a systemd-mode and a pod-mode mount are
// live: both keep working, and deleting the workloads afterwards leaves nothing (the restarted
// plugin retires the Mountpoint Pod), no mount-s3 process either: the restarted container holds
// copies of the mounts below the plugin directory (its /csi), which must not keep one alive.
func testNodePluginRestart(t *testing.T) {
	ns := newNamespace(t, "restart")
	bucket := "restart-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{})
	var pods []*corev1.Pod
	for _, mode := range []string{"systemd", "pod"} {
		setMode(t, mode)
		p := workload(t, ns, "w-"+mode, claim, podOpts{})
		waitRunning(t, 2*time.Minute, p)
		pods = append(pods, p)
	}
	mustRun(t)(kubectl(t, "-n", releaseNS, "delete", "pod", "-l", "app=s3-csi-node", "--wait=true"))
	mustRun(t)(kubectl(t, "-n", releaseNS, "rollout", "status", "ds/s3-csi-node", "--timeout=2m"))
	for _, p := range pods {
		mustRun(t)(execIn(t, p, "printf 'after restart\\n' > /data/"+p.Name+" && cat /data/"+p.Name))
		if got := string(env.s3.GetObject(t, bucket, p.Name)); got != "after restart\n" {
			t.Errorf("%s after the restart: object %q", p.Name, got)
		}
	}
	deletePods(t, pods...)
	expectClean(t)
	harness.Eventually(t, time.Minute, func() string {
		if pids := harness.MountS3PIDs(bucket); len(pids) > 0 {
			return fmt.Sprintf("mount-s3 still runs for the bucket after every workload is gone: pids %v", pids)
		}
		return ""
	})
}

// testControllerBurst creates 50 workloads over 10 volumes in pod mode and restarts the
// controller (Pod Reconciler and CSI controller) in the middle: every workload runs, with
// exactly one attachment and one Mountpoint Pod per volume.
func testControllerBurst(t *testing.T) {
	start := time.Now()
	setMode(t, "pod")
	ns := newNamespace(t, "burst")
	const volumes, perVolume = 10, 5
	var claims []string
	for v := 0; v < volumes; v++ {
		bucket := fmt.Sprintf("burst-%d-%s", v, suffix())
		env.s3.CreateBucket(t, bucket)
		claims = append(claims, staticVolume(t, ns, fmt.Sprintf("v%d", v), bucket, volumeOpts{}))
	}
	t.Logf("%d volumes bound after %s", volumes, time.Since(start).Round(time.Second))
	var pods []*corev1.Pod
	for i := 0; i < volumes*perVolume; i++ {
		pods = append(pods, workload(t, ns, fmt.Sprintf("w%02d", i), claims[i%volumes], podOpts{}))
		if i == volumes*perVolume/2 {
			mustRun(t)(kubectl(t, "-n", releaseNS, "delete", "pod", "-l", "app in (s3-csi-controller, s3-pod-reconciler)", "--wait=false"))
		}
	}
	t.Logf("%d workloads created after %s", len(pods), time.Since(start).Round(time.Second))
	waitRunning(t, 5*time.Minute, pods...)
	t.Logf("every workload Running after %s", time.Since(start).Round(time.Second))
	st := currentState(t)
	if len(st.attachments) != volumes || len(st.mpPods) != volumes {
		t.Errorf("want exactly %d attachments and Mountpoint Pods (one per volume), got %d and %d: %s", volumes, len(st.attachments), len(st.mpPods), st)
	}
	waitRollout(t)
	deletePods(t, pods...)
	expectClean(t)
}

// testUninstall removes the driver as docs/uninstall.md says, after every workload is gone,
// and checks what stays and what goes.
func testUninstall(t *testing.T) {
	expectClean(t)
	out := mustRun(t)(kubectl(t, "get", "s3pa", "-o", "name"))
	if strings.TrimSpace(out) != "" {
		t.Fatalf("attachments left before uninstall: %s", out)
	}
	mustRun(t)(helm(t, "uninstall", release, "-n", releaseNS, "--wait"))
	ctx := context.Background()
	for _, o := range []client.Object{
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName}},
	} {
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s still exists after helm uninstall (%v)", o, o.GetName(), err)
		}
	}
	harness.Eventually(t, 2*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(releaseNS), client.MatchingLabels{"app": "s3-csi-node"}))
		if len(pods.Items) > 0 {
			return fmt.Sprintf("%d node plugin pods left", len(pods.Items))
		}
		return ""
	})
	// Kept on purpose (docs/uninstall.md): the CRD and the Mountpoint namespace.
	mustRun(t)(kubectl(t, "get", "crd", "mountpoints3podattachments.s3.csi.scality.com"))
	mustRun(t)(kubectl(t, "get", "namespace", mpNamespace))
	// Step 3's removals, then step 4 on the node.
	mustRun(t)(kubectl(t, "delete", "crd", "mountpoints3podattachments.s3.csi.scality.com"))
	mustRun(t)(kubectl(t, "delete", "namespace", mpNamespace, "--wait=true"))
	plugin := filepath.Join(rig.KubeletDir, "plugins", driverName)
	if out, _ := command(t, 10*time.Second, "findmnt", "-R", plugin); strings.TrimSpace(out) != "" {
		t.Errorf("mounts below %s after uninstall:\n%s", plugin, out)
	}
	if _, err := os.Stat(filepath.Join(rig.KubeletDir, "plugins_registry", driverName+"-reg.sock")); !os.IsNotExist(err) {
		t.Errorf("the registration socket outlived the node plugin (%v): kubelet would keep it registered", err)
	}
	mustRun(t)(kubectl(t, "label", "nodes", "--all", "s3.csi.scality.com/mounter-"))
	mustRun(t)(kubectl(t, "annotate", "nodes", "--all", "s3.csi.scality.com/effective-mounter-"))
	harness.Must(t, os.RemoveAll(plugin))
	harness.Must(t, os.RemoveAll(rig.MountS3InstallDir))
	harness.Eventually(t, time.Minute, func() string {
		out, _ := kubectl(t, "get", "csinode", rig.NodeName, "-o", "jsonpath={.spec.drivers[*].name}")
		if strings.Contains(out, driverName) {
			return "kubelet still lists the driver in CSINode"
		}
		return ""
	})
}

// killMountS3 kills (-9) every mount-s3 serving bucket on the node: systemd mode's units (their
// main process) and Mountpoint Pods' mount-s3 alike (both show the bucket on their command
// line).
func killMountS3(t *testing.T, bucket string) int {
	t.Helper()
	pids := harness.MountS3PIDs(bucket)
	for _, pid := range pids {
		harness.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	return len(pids)
}

// eventsOn returns the Events on a pod.
func eventsOn(t *testing.T, ns, pod string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	harness.Must(t, env.c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod {
			out = append(out, e)
		}
	}
	return out
}

// eventCount returns how many times Events of reason were reported on a pod (repeats are
// folded into one Event with a count).
func eventCount(t *testing.T, ns, pod, reason string) int32 {
	t.Helper()
	var n int32
	for _, e := range eventsOn(t, ns, pod) {
		if e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}

// eventReasons returns the reasons of the Events on a pod.
func eventReasons(t *testing.T, ns, pod string) []string {
	t.Helper()
	var out []string
	for _, e := range eventsOn(t, ns, pod) {
		out = append(out, e.Reason)
	}
	return out
}

// testMountHealth kills mount-s3 under two workloads of a volume with mountRecovery:
// restart-pod, in one mode: the node plugin notices (Event MountDead), mounts it again on the
// host (MountRepaired), the workload whose volumeMount has HostToContainer propagation keeps
// writing to the live mount without a restart, and the one without (a Deployment's pod) is
// deleted so its ReplicaSet recreates it with a live mount (MountRecoveryRestartedPod).
func testMountHealth(t *testing.T, mode string) {
	setMode(t, mode)
	ns := newNamespace(t, "health-"+mode)
	ctx := context.Background()
	bucket := "health-" + mode + "-" + suffix()
	env.s3.CreateBucket(t, bucket)
	claim := staticVolume(t, ns, "data", bucket, volumeOpts{attributes: map[string]string{"mountRecovery": "restart-pod"}})
	h2c := corev1.MountPropagationHostToContainer
	writer := workload(t, ns, "writer", claim, podOpts{propagation: &h2c, command: `i=0; trap 'exit 0' TERM
while true; do i=$((i+1)); if printf 'w%d\n' $i > /data/w-$i 2>/dev/null; then echo "ok $i"; else echo "fail $i"; fi; sleep 0.3; done`})
	blindPod := workloadSpec(ns, "blind", claim, podOpts{})
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "blind", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "blind"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "blind"}}, Spec: blindPod.Spec},
		},
	}
	harness.Must(t, env.c.Create(ctx, dep))
	var blind *corev1.Pod
	harness.Eventually(t, 2*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "blind"}))
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				blind = p
				return ""
			}
		}
		return "the Deployment's pod is not running yet"
	})
	waitRunning(t, 2*time.Minute, writer)
	time.Sleep(time.Second)
	n := killMountS3(t, bucket)
	if n == 0 {
		t.Fatal("no mount-s3 serves the bucket")
	}
	killed := time.Now()
	t.Logf("%s mode: killed %d mount-s3 serving the bucket", mode, n)
	harness.Eventually(t, time.Minute, func() string {
		got := eventReasons(t, ns, writer.Name)
		if slices.Contains(got, "MountDead") && slices.Contains(got, "MountRepaired") {
			return ""
		}
		return fmt.Sprintf("writer's events %v, want MountDead and MountRepaired", got)
	})
	t.Logf("%s mode: MountDead and MountRepaired on the writer %v after the kill", mode, time.Since(killed).Round(time.Millisecond))
	// The writer keeps writing through the repaired mount, without a restart.
	before := len(env.s3.ListKeys(t, bucket))
	harness.Eventually(t, 30*time.Second, func() string {
		if n := len(env.s3.ListKeys(t, bucket)); n <= before+3 {
			return fmt.Sprintf("%d objects, %d at the repair: the writer does not write through the repaired mount", n, before)
		}
		return ""
	})
	var w corev1.Pod
	harness.Must(t, env.c.Get(ctx, client.ObjectKeyFromObject(writer), &w))
	if rc := w.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Errorf("the writer restarted %d times; HostToContainer should have let it see the repair", rc)
	}
	// The blind pod is replaced by its ReplicaSet, and the new one has a live mount.
	harness.Eventually(t, time.Minute, func() string {
		if got := eventReasons(t, ns, blind.Name); !slices.Contains(got, "MountRecoveryRestartedPod") {
			return fmt.Sprintf("blind pod's events %v, want MountRecoveryRestartedPod", got)
		}
		return ""
	})
	var fresh *corev1.Pod
	harness.Eventually(t, 2*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "blind"}))
		for i := range pods.Items {
			if p := &pods.Items[i]; p.UID != blind.UID && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				fresh = p
				return ""
			}
		}
		return "no new pod of the Deployment is running"
	})
	if out, err := execIn(t, fresh, "ls /data | wc -l"); err != nil || strings.TrimSpace(out) == "0" {
		t.Errorf("the recreated pod's mount: %q, %v", out, err)
	}
	// The replaced pod's unpublish leaves the other workloads' mounts alone (pod mode: its
	// target's unmount must not propagate to theirs): no second death, no second restart.
	harness.Eventually(t, 2*time.Minute, func() string {
		var old corev1.Pod
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(blind), &old); err == nil {
			return "the replaced pod is still there (its volume not unpublished yet)"
		}
		return ""
	})
	time.Sleep(3 * time.Second) // the monitor checks every target right after an unpublish
	if n := eventCount(t, ns, writer.Name, "MountDead"); n != 1 {
		t.Errorf("the writer's mount died %d times, want once (the replaced pod's unpublish took its mount away?)", n)
	}
	if got := eventReasons(t, ns, fresh.Name); slices.Contains(got, "MountDead") {
		t.Errorf("the recreated pod's mount died: events %v", got)
	}
	harness.Must(t, env.c.Delete(ctx, dep))
	deletePods(t, writer)
	harness.Eventually(t, 2*time.Minute, func() string {
		var pods corev1.PodList
		harness.Must(t, env.c.List(ctx, &pods, client.InNamespace(ns)))
		if len(pods.Items) > 0 {
			return fmt.Sprintf("%d pods left", len(pods.Items))
		}
		return ""
	})
	expectClean(t)
}

// mountS3UID is the uid of the user the chart runs systemd-mode mount-s3 as (node.mountS3User),
// from the /etc/passwd of the node's systemd (rig.EtcDir); the test fails when the driver has
// not created it.
func mountS3UID(t *testing.T) int {
	t.Helper()
	uid, _ := harness.PasswdIDs(t, rig.EtcDir, "s3csi-mount")
	return uid
}
