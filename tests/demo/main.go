// Command demo (make demo) shows the driver's main job end to end on this machine, with no real
// cluster: an S3 server, a Kubernetes API server with the driver's controller, one node with its
// systemd and the node plugin. Playing kubelet over the CSI socket, it mounts a bucket in systemd
// mode, migrates the node live to pod mode, mounts the same volume through a Mountpoint Pod, and
// shows both workloads sharing the data until they end and everything is cleaned up. Every step is printed in
// plain words; everything it starts is stopped and removed at the end, also on failure or Ctrl-C.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

var stepNo int

func step(format string, args ...any) {
	stepNo++
	fmt.Printf("\n%d. %s\n", stepNo, fmt.Sprintf(format, args...))
}

func say(format string, args ...any) { fmt.Printf("   %s\n", fmt.Sprintf(format, args...)) }

func main() {
	if os.Geteuid() != 0 {
		fmt.Println("make demo mounts a filesystem and runs systemd: run it as root.")
		os.Exit(1)
	}
	// Failures (Fatalf) and Ctrl-C clean up everything before exiting.
	t := harness.NewMainTB()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; t.Fatalf("interrupted") }()
	run(t)
	step("Cleaning up: stopping the driver, systemd and the S3 server, removing temporary files.")
	t.Close()
	fmt.Println("\nDone. Everything the demo started has been stopped and removed.")
}

func run(t harness.TB) {
	ctx := context.Background()
	step("Starting an S3 server (versitygw, posix backend) on a free loopback port.")
	s3 := harness.StartS3(t)
	say("endpoint %s, region %s, data in %s", s3.Endpoint, s3.Region, s3.DataDir)

	step("Creating bucket %q with one object, hello.txt, through the S3 API.", "demo-bucket")
	s3.CreateBucket(t, "demo-bucket")
	s3.PutObject(t, "demo-bucket", "hello.txt", []byte("Hello from the bucket!\n"))
	say("bucket holds: %s", strings.Join(s3.ListKeys(t, "demo-bucket"), ", "))

	step("Starting a Kubernetes API server (kube-apiserver + etcd) and the driver's controller (bin/scality-csi-controller).")
	kube := harness.StartAPIServer(t, harness.KubeOptions{})
	kube.EnsureNamespace(t, "mount-s3")
	kube.EnsureNamespace(t, "demo")
	harness.StartController(t, kube, harness.ControllerOptions{ExtraArgs: []string{"--batch-window=100ms"}})
	say("API server %s; the controller creates Mountpoint Pods for workloads on pod-mode nodes", kube.Config.Host)

	const nodeName = "demo-node"
	kubelet := harness.NewKubeletDir(t)
	step("Creating node %s labelled %s=systemd (the cluster default is pod).", nodeName, mountmode.Label)
	must(t, kube.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{mountmode.Label: "systemd"}}}))
	sd := harness.StartSystemd(t, kubelet)
	harness.CleanupMounts(t, kubelet)
	harness.StartMountpointKubelet(t, kube, nodeName, kubelet, "mount-s3")
	say("its systemd: a user manager in its own mount namespace (D-Bus socket %s)", sd.Socket)
	say("its kubelet (for Mountpoint Pods only): the test harness, running bin/scality-csi-mounter per pod")

	step("Starting the node plugin (bin/scality-s3-csi-driver) on %s.", nodeName)
	kube.BindRBAC(t, "node-rbac.yaml", "system:node:"+nodeName)
	drv := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, NodeID: nodeName,
		ExtraArgs: []string{"--default-mounter=pod", "--kubeconfig=" + kube.Kubeconfig(t, "system:node:"+nodeName), "--v=2"}})
	info, err := drv.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	say("driver %s, version %s; effective mode of the node: %s", info.Name, info.VendorVersion, effectiveMode(t, kube, nodeName))

	pv := demoVolume(t, kube)
	a := demoWorkload(t, kube, "workload-a", nodeName)
	step("Publishing workload A's volume like kubelet would (NodePublishVolume).")
	ta := publish(t, drv, kubelet, a, pv)
	unit := systemd.MountUnitName(ta)
	say("A is mounted by the transient systemd unit %s:", unit)
	if out, err := sd.Systemctl("show", "--property=ActiveState,MainPID", unit); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			say("  %s", line)
		}
	}
	b, err := os.ReadFile(filepath.Join(ta, "hello.txt"))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	say("A reads hello.txt: %q", string(b))
	must(t, os.WriteFile(filepath.Join(ta, "from-a.txt"), []byte("written by A in systemd mode\n"), 0o644))
	say("A wrote from-a.txt")
	setRunning(t, kube, a)

	step("Migrating the node live: relabelling %s with %s=pod.", nodeName, mountmode.Label)
	must(t, kube.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+mountmode.Label+`":"pod"}}}`))))
	waitFor(t, func() bool { return effectiveMode(t, kube, nodeName) == "pod" })
	say("the node plugin switched without a restart: effective mode %s (annotation on the Node)", effectiveMode(t, kube, nodeName))
	must(t, os.WriteFile(filepath.Join(ta, "a-still-works.txt"), []byte("A keeps its systemd mount\n"), 0o644))
	say("A keeps working on its systemd mount: wrote a-still-works.txt")

	wb := demoWorkload(t, kube, "workload-b", nodeName)
	step("Publishing workload B on the same volume and node: it goes through a Mountpoint Pod.")
	tb := publish(t, drv, kubelet, wb, pv)
	var pods corev1.PodList
	must(t, kube.Client.List(ctx, &pods, client.InNamespace("mount-s3")))
	for _, p := range pods.Items {
		say("Mountpoint Pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
	}
	var atts crdv2.MountpointS3PodAttachmentList
	must(t, kube.Client.List(ctx, &atts))
	for _, at := range atts.Items {
		say("attachment %s records node %s, PV %s, %d Mountpoint Pod(s)", at.Name, at.Spec.NodeName, at.Spec.PersistentVolumeName, len(at.Spec.MountpointS3PodAttachments))
	}
	b, err = os.ReadFile(filepath.Join(tb, "from-a.txt"))
	if err != nil {
		t.Fatalf("read through B: %v", err)
	}
	say("B reads A's file: %q", string(b))
	must(t, os.WriteFile(filepath.Join(tb, "from-b.txt"), []byte("written by B in pod mode\n"), 0o644))

	step("Workload A ends: NodeUnpublishVolume stops its unit; B is untouched.")
	unpublish(t, drv, ta)
	say("mount-s3 units left: %d; B still reads from-b.txt: %v", len(sd.Units("mount-s3-*")), fileExists(filepath.Join(tb, "from-b.txt")))

	step("Workload B ends: the controller retires the Mountpoint Pod, the node unmounts it, the pod finishes.")
	unpublish(t, drv, tb)
	must(t, kube.Client.Delete(ctx, a, client.GracePeriodSeconds(0)))
	must(t, kube.Client.Delete(ctx, wb, client.GracePeriodSeconds(0)))
	waitFor(t, func() bool {
		var pods corev1.PodList
		var atts crdv2.MountpointS3PodAttachmentList
		return kube.Client.List(ctx, &pods, client.InNamespace("mount-s3")) == nil && len(pods.Items) == 0 &&
			kube.Client.List(ctx, &atts) == nil && len(atts.Items) == 0
	})
	say("Mountpoint Pods left: 0, attachments left: 0, shared mounts left: %d", len(harness.MountsBelow(filepath.Join(kubelet, "plugins"))))

	step("Looking at the bucket through the S3 API.")
	say("bucket holds: %s", strings.Join(s3.ListKeys(t, "demo-bucket"), ", "))
}

func demoVolume(t harness.TB, kube *harness.Kube) *corev1.PersistentVolume {
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:  []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:     &corev1.ObjectReference{Namespace: "demo", Name: "demo-claim"},
			MountOptions: []string{"allow-delete"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "s3.csi.scality.com", VolumeHandle: "demo-volume", VolumeAttributes: map[string]string{"bucketName": "demo-bucket"},
			}},
		},
	}
	must(t, kube.Client.Create(ctx, pv))
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-claim", Namespace: "demo"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: pv.Spec.AccessModes, StorageClassName: ptr.To(""), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	must(t, kube.Client.Create(ctx, pvc))
	pvc.Status.Phase = corev1.ClaimBound
	must(t, kube.Client.Status().Update(ctx, pvc))
	return pv
}

func demoWorkload(t harness.TB, kube *harness.Kube, name, node string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "demo-claim"}}}}},
	}
	must(t, kube.Client.Create(context.Background(), p))
	return p
}

func publish(t harness.TB, drv *harness.Driver, kubelet string, w *corev1.Pod, pv *corev1.PersistentVolume) string {
	target := harness.TargetPath(t, kubelet, string(w.UID), pv.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err := drv.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: pv.Spec.CSI.VolumeHandle, TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: pv.Spec.MountOptions}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": "demo-bucket", "csi.storage.k8s.io/pod.uid": string(w.UID)},
	})
	if err != nil {
		t.Fatalf("NodePublishVolume(%s): %v", w.Name, err)
	}
	say("published %s at %s in %v", w.Name, target, time.Since(start).Round(time.Millisecond))
	return target
}

func unpublish(t harness.TB, drv *harness.Driver, target string) {
	if _, err := drv.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "demo-volume", TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
}

// setRunning plays kubelet: once its volumes are mounted, the workload runs.
func setRunning(t harness.TB, kube *harness.Kube, p *corev1.Pod) {
	var cur corev1.Pod
	must(t, kube.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	cur.Status.Phase = corev1.PodRunning
	must(t, kube.Client.Status().Update(context.Background(), &cur))
}

func effectiveMode(t harness.TB, kube *harness.Kube, node string) string {
	var n corev1.Node
	must(t, kube.Client.Get(context.Background(), client.ObjectKey{Name: node}, &n))
	return n.Annotations[nodemode.AnnotationEffectiveMode]
}

func waitFor(t harness.TB, cond func() bool) {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func must(t harness.TB, err error) {
	if err != nil {
		t.Fatalf("%v", err)
	}
}
