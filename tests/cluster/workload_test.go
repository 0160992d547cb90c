package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func suffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newNamespace creates a namespace for one scenario and deletes it (waiting until it is gone,
// so every unpublish ran) when the test ends.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "s3e-" + name + "-" + suffix()}}
	harness.Must(t, env.c.Create(context.Background(), ns))
	t.Cleanup(func() {
		_ = env.c.Delete(context.Background(), ns)
		harness.Eventually(t, 3*time.Minute, func() string {
			err := env.c.Get(context.Background(), client.ObjectKeyFromObject(ns), &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				return ""
			}
			return fmt.Sprintf("namespace %s still exists (%v)", ns.Name, err)
		})
	})
	return ns.Name
}

// volumeOpts shape a static volume.
type volumeOpts struct {
	mountOptions []string
	accessMode   corev1.PersistentVolumeAccessMode
	attributes   map[string]string
	secretRef    *corev1.SecretReference
}

// staticVolume creates a PersistentVolume naming bucket and a claim bound to it in ns; the PV
// (Retain: the bucket is the test's) is deleted when the test ends.
func staticVolume(t *testing.T, ns, name, bucket string, o volumeOpts) (claim string) {
	t.Helper()
	ctx := context.Background()
	mode := o.accessMode
	if mode == "" {
		mode = corev1.ReadWriteMany
	}
	attrs := map[string]string{"bucketName": bucket}
	for k, v := range o.attributes {
		attrs[k] = v
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{mode},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			MountOptions:                  o.mountOptions,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: ns + "-" + name, VolumeAttributes: attrs, NodePublishSecretRef: o.secretRef,
			}},
		},
	}
	harness.Must(t, env.c.Create(ctx, pv))
	t.Cleanup(func() { _ = env.c.Delete(context.Background(), pv) })
	// The claim comes once the PV controller has seen the volume: a claim it sees first, naming
	// a volume not in its cache yet, waits for its periodic resync (measured: about 20 s a
	// claim, 3m21s for the burst scenario's ten).
	harness.Eventually(t, time.Minute, func() string {
		var cur corev1.PersistentVolume
		harness.Must(t, env.c.Get(ctx, client.ObjectKeyFromObject(pv), &cur))
		if cur.Status.Phase == "" || cur.Status.Phase == corev1.VolumePending {
			return fmt.Sprintf("PV %s is %q", pv.Name, cur.Status.Phase)
		}
		return ""
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	harness.Must(t, env.c.Create(ctx, pvc))
	waitBound(t, pvc)
	return name
}

// waitBound waits until a claim is Bound. Scenarios create their pods after that: a pod
// created first is parked by the scheduler on "unbound immediate PersistentVolumeClaims" and,
// seen in clean-clone runs (static and dynamic volumes alike), was at times not requeued when
// the claim bound, only at the next unrelated event or the scheduler's periodic flush (a
// scheduler race the scenarios are not about).
func waitBound(t *testing.T, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	harness.Eventually(t, time.Minute, func() string {
		var cur corev1.PersistentVolumeClaim
		harness.Must(t, env.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), &cur))
		if cur.Status.Phase != corev1.ClaimBound {
			return fmt.Sprintf("claim %s/%s is %s", pvc.Namespace, pvc.Name, cur.Status.Phase)
		}
		return ""
	})
}

// podOpts shape a workload.
type podOpts struct {
	command   string // shell script; default: sleep until SIGTERM
	fsGroup   *int64
	runAsUser *int64
	readOnly  bool
	// propagation of the volume mount (HostToContainer lets a repaired mount reach it).
	propagation *corev1.MountPropagationMode
}

// idle is a workload that does nothing until SIGTERM (and exits at once then).
const idle = "trap 'exit 0' TERM; while true; do sleep 1; done"

// workload creates a busybox pod in ns with claim mounted at /data and returns it.
func workload(t *testing.T, ns, name, claim string, o podOpts) *corev1.Pod {
	t.Helper()
	p := workloadSpec(ns, name, claim, o)
	harness.Must(t, env.c.Create(context.Background(), p))
	return p
}

// workloadSpec is the pod workload creates.
func workloadSpec(ns, name, claim string, o podOpts) *corev1.Pod {
	script := o.command
	if script == "" {
		script = idle
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "s3e"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			SecurityContext:               &corev1.PodSecurityContext{FSGroup: o.fsGroup, RunAsUser: o.runAsUser},
			Containers: []corev1.Container{{
				Name: "app", Image: rig.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: o.readOnly, MountPropagation: o.propagation}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	return p
}

// waitRunning waits until every pod is Running and ready.
func waitRunning(t *testing.T, timeout time.Duration, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		harness.Eventually(t, timeout, func() string {
			var cur corev1.Pod
			if err := env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
				return err.Error()
			}
			if cur.Status.Phase == corev1.PodRunning && len(cur.Status.ContainerStatuses) > 0 && cur.Status.ContainerStatuses[0].Ready {
				return ""
			}
			return fmt.Sprintf("pod %s/%s is %s; events: %s", p.Namespace, p.Name, cur.Status.Phase, podEvents(p))
		})
	}
}

// podEvents summarises the events of a pod (for failure messages).
func podEvents(p *corev1.Pod) string {
	var list corev1.EventList
	if err := env.c.List(context.Background(), &list, client.InNamespace(p.Namespace)); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == p.Name {
			out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
		}
	}
	if len(out) > 5 {
		out = out[len(out)-5:]
	}
	return strings.Join(out, " | ")
}

// execIn runs a shell script in a pod's container.
func execIn(t *testing.T, p *corev1.Pod, script string) (string, error) {
	t.Helper()
	return kubectl(t, "-n", p.Namespace, "exec", p.Name, "--", "sh", "-c", script)
}

// deletePods deletes pods and waits until they are gone (their volumes unpublished).
func deletePods(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := env.c.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete pod %s: %v", p.Name, err)
		}
	}
	for _, p := range pods {
		harness.Eventually(t, 2*time.Minute, func() string {
			err := env.c.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				return ""
			}
			return fmt.Sprintf("pod %s/%s still exists (%v); events: %s", p.Namespace, p.Name, err, podEvents(p))
		})
	}
}

// setMode labels the node with a mount mode and waits until its node plugin uses it (the
// effective-mounter annotation).
func setMode(t *testing.T, mode string) {
	t.Helper()
	mustRun(t)(kubectl(t, "label", "node", rig.NodeName, "s3.csi.scality.com/mounter="+mode, "--overwrite"))
	harness.Eventually(t, time.Minute, func() string {
		if got := nodeObj(t).Annotations["s3.csi.scality.com/effective-mounter"]; got != mode {
			return fmt.Sprintf("effective mode %q, want %q", got, mode)
		}
		return ""
	})
}

// nodeState is what the driver holds on the node and in the cluster.
type nodeState struct {
	mounts      []string // mount-s3 mounts (and binds) below the kubelet directory
	units       []string // mount-s3 units of the systemd user manager
	stateDirs   []string // systemd mode's per-mount state (credential files)
	mpPods      []string // Mountpoint Pods
	attachments []string // MountpointS3PodAttachments
}

func (s nodeState) empty() bool {
	return len(s.mounts)+len(s.units)+len(s.stateDirs)+len(s.mpPods)+len(s.attachments) == 0
}

func (s nodeState) String() string {
	return fmt.Sprintf("mounts %v, units %v, state dirs %v, Mountpoint Pods %v, attachments %v", s.mounts, s.units, s.stateDirs, s.mpPods, s.attachments)
}

// currentState reads the node's mount table (this process shares the host's mount namespace),
// the user manager's units, systemd mode's state directory and the API.
func currentState(t *testing.T) nodeState {
	t.Helper()
	var s nodeState
	var err error
	s.mounts, err = driverMounts()
	harness.Must(t, err)
	out, err := rig.Systemctl("list-units", "--all", "--plain", "--no-legend", "mount-s3-*")
	harness.Must(t, err)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			s.units = append(s.units, f[0])
		}
	}
	entries, _ := os.ReadDir(filepath.Join(rig.KubeletDir, "plugins", driverName, "systemd"))
	for _, e := range entries {
		s.stateDirs = append(s.stateDirs, e.Name())
	}
	var pods corev1.PodList
	harness.Must(t, env.c.List(context.Background(), &pods, client.InNamespace(mpNamespace)))
	for _, p := range pods.Items {
		if p.Labels["app.kubernetes.io/component"] == "headroom" {
			continue // the chart's headroom pods (mountpointPod.headroom), not Mountpoint Pods
		}
		s.mpPods = append(s.mpPods, p.Name)
	}
	var atts crdv2.MountpointS3PodAttachmentList
	// Before this driver (Scality's 1.x on the node) there may be no CRD at all.
	if err := env.c.List(context.Background(), &atts); err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, a := range atts.Items {
		s.attachments = append(s.attachments, a.Name)
	}
	return s
}

// driverMounts lists the mount-s3 mounts (and binds of them) below the kubelet directory, from
// the mount table (this process shares the host's mount namespace).
func driverMounts() ([]string, error) {
	entries, err := mounttable.Table{}.List()
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, e := range entries {
		if e.Source == mounttable.FSName && strings.HasPrefix(e.MountPoint, rig.KubeletDir+"/") {
			mounts = append(mounts, e.MountPoint)
		}
	}
	return mounts, nil
}

// expectClean waits until the driver holds nothing on the node: no mount, unit, credential
// file, Mountpoint Pod or attachment.
func expectClean(t *testing.T) {
	t.Helper()
	harness.Eventually(t, 2*time.Minute, func() string {
		if s := currentState(t); !s.empty() {
			return "left behind: " + s.String()
		}
		return ""
	})
}
