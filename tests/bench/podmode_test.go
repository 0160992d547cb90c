package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

const podRuns = 20

// BenchmarkNodePublishPod prints NodePublish latency in pod mode once the workload's Mountpoint
// Pod is Running: the first publish (FUSE mount, hand-over to the pod, mount-s3 start, bind) and
// a shared publish (bind only), and the stand-in mount-s3's own start on a handed-over FUSE fd,
// so the driver's overhead over the mount start can be read off.
func BenchmarkNodePublishPod(b *testing.B) {
	harness.RequireRoot(b)
	for i := 0; i < b.N; i++ {
		runPodBench(b)
	}
}

func runPodBench(b *testing.B) {
	ctx := context.Background()
	k := harness.StartAPIServer(b, harness.KubeOptions{})
	k.EnsureNamespace(b, "mount-s3")
	k.EnsureNamespace(b, "bench")
	s3 := harness.StartS3(b)
	s3.CreateBucket(b, "pod-bench")
	kubelet := harness.NewKubeletDir(b)
	harness.CleanupMounts(b, kubelet)
	const node = "bench-node"
	harness.StartController(b, k, harness.ControllerOptions{ExtraArgs: []string{"--v=0"}})
	harness.StartMountpointKubelet(b, k, node, kubelet, "mount-s3")
	k.BindRBAC(b, "node-rbac.yaml", "system:node:"+node)
	drv := harness.StartDriver(b, harness.DriverOptions{KubeletDir: kubelet, S3: s3, WithCredentials: true, NodeID: node,
		ExtraArgs: []string{"--default-mounter=pod", "--kubeconfig=" + k.Kubeconfig(b, "system:node:"+node), "--v=0"}})

	standin := standinOnFD(b, s3, kubelet)

	var first, shared []time.Duration
	for r := 0; r < podRuns; r++ {
		pv := benchVolume(b, k, fmt.Sprintf("pv-%02d", r))
		a, bb := benchWorkload(b, k, pv, node, "a"), benchWorkload(b, k, pv, node, "b")
		waitAttachedAndRunning(b, k, node, pv.Name, 2)
		for _, w := range []*corev1.Pod{a, bb} {
			req := podPublishReq(b, kubelet, pv, w)
			start := time.Now()
			if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
				b.Fatalf("publish %s: %v\n%s", w.Name, err, drv.Log())
			}
			if w == a {
				first = append(first, time.Since(start))
			} else {
				shared = append(shared, time.Since(start))
			}
		}
	}
	st, f, s := summarize(standin), summarize(first), summarize(shared)
	fmt.Printf("\nNodePublish latency, pod mode, after the Mountpoint Pod is Running (%d runs)\n", podRuns)
	fmt.Printf("  stand-in mount-s3 start on a handed-over fd:  %s\n", st)
	fmt.Printf("  first publish (mount, hand-over, bind):       %s\n", f)
	fmt.Printf("  driver overhead over the mount start (median): %.1f ms\n", ms(f.median-st.median))
	fmt.Printf("  shared publish (bind only):                   %s\n\n", s)
	b.ReportMetric(ms(f.median), "first-median-ms")
	b.ReportMetric(ms(f.median-st.median), "overhead-median-ms")
	b.ReportMetric(ms(s.median), "shared-median-ms")
}

// standinOnFD measures the stand-in serving a FUSE fd handed over by its parent, as in a
// Mountpoint Pod: from exec until the mount answers.
func standinOnFD(b *testing.B, s3 *harness.S3Server, kubelet string) []time.Duration {
	dir := filepath.Join(kubelet, "standin-fd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	for r := 0; r < podRuns; r++ {
		f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
		if err != nil {
			b.Fatal(err)
		}
		opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions", f.Fd())
		if err := unix.Mount("mountpoint-s3", dir, "fuse", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, opts); err != nil {
			b.Fatal(err)
		}
		cmd := standinCmd(b, s3, "pod-bench", "/dev/fd/3", "--foreground", "--force-path-style")
		cmd.ExtraFiles = []*os.File{f}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := os.Stat(dir); err != nil { // blocks until mount-s3 answers
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
		f.Close()
		_ = unix.Unmount(dir, 0)
		_ = cmd.Wait()
	}
	return out
}

// benchVolume creates a static PV of this driver for bucket "pod-bench" and its bound claim in
// namespace bench.
func benchVolume(b *testing.B, k *harness.Kube, name string) *corev1.PersistentVolume {
	return benchVolumeOf(b, k, name, "pod-bench")
}

// benchVolumeOf creates a static PV named name for bucket and its bound claim "claim-<name>".
func benchVolumeOf(b *testing.B, k *harness.Kube, name, bucket string) *corev1.PersistentVolume {
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: "bench", Name: "claim-" + name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: name, VolumeAttributes: map[string]string{"bucketName": bucket},
			}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-" + name, Namespace: "bench"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: ptr.To(""), VolumeName: name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	must(b, k.Client.Create(ctx, pv))
	must(b, k.Client.Create(ctx, pvc))
	pvc.Status.Phase = corev1.ClaimBound
	must(b, k.Client.Status().Update(ctx, pvc))
	return pv
}

func benchWorkload(b *testing.B, k *harness.Kube, pv *corev1.PersistentVolume, node, suffix string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pv.Name + "-" + suffix, Namespace: "bench"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pv.Spec.ClaimRef.Name}}}},
		},
	}
	must(b, k.Client.Create(context.Background(), p))
	return p
}

// waitAttachedAndRunning waits (outside the timed part) until the PV's attachment records n
// workloads and its Mountpoint Pod is Running.
func waitAttachedAndRunning(b *testing.B, k *harness.Kube, node, pv string, n int) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var atts crdv2.MountpointS3PodAttachmentList
		must(b, k.Client.List(context.Background(), &atts))
		for _, a := range atts.Items {
			if a.Spec.NodeName != node || a.Spec.PersistentVolumeName != pv {
				continue
			}
			for mp, ws := range a.Spec.MountpointS3PodAttachments {
				var pod corev1.Pod
				if len(ws) == n && k.Client.Get(context.Background(), client.ObjectKey{Namespace: "mount-s3", Name: mp}, &pod) == nil && pod.Status.Phase == corev1.PodRunning {
					return
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("PV %s: Mountpoint Pod not attached and Running", pv)
}

// podPublishReq is kubelet's NodePublishVolume of pv (bucket pod-bench) for workload w.
func podPublishReq(b *testing.B, kubelet string, pv *corev1.PersistentVolume, w *corev1.Pod) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   pv.Spec.CSI.VolumeHandle,
		TargetPath: harness.TargetPath(b, kubelet, string(w.UID), pv.Name),
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": "pod-bench", "csi.storage.k8s.io/pod.uid": string(w.UID)},
	}
}
