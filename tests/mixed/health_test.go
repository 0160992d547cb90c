package mixed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestRepublishRepairReported: kubelet's republish that gets to a dead mount before the node
// plugin's own checks (here: the monitor is off, so it always does) repairs it, and the workload
// pod still learns of it as from the monitor's repair: Events MountDead and MountRepaired, and,
// with mountRecovery: restart-pod and a container that mounts the volume without
// HostToContainer, the pod deleted for its owner to recreate (MountRecoveryRestartedPod).
// In both modes, against a real API server, with the real mount-s3 processes killed.
func TestRepublishRepairReported(t *testing.T) {
	for _, mode := range []mountmode.Mode{mountmode.Systemd, mountmode.Pod} {
		t.Run(string(mode), func(t *testing.T) {
			c := newCluster(t)
			bucket := "repub-" + string(mode) + "-" + c.id
			c.s3.CreateBucket(t, bucket)
			pv := c.volume("repub", bucket)
			n := c.node("n", nodeOpts{label: string(mode), args: []string{"--health-check-interval=0", "--restart-pods"}})
			kube.BindRBAC(t, "node-restart-rbac.yaml", "system:node:"+n.name)
			n.waitEffective(mode)

			w := blindWorkload(t, n, "blind", pv)
			req := n.publishReq(w, pv, "")
			req.VolumeContext["mountRecovery"] = "restart-pod"
			req.VolumeContext["csi.storage.k8s.io/pod.name"] = w.Name
			req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = w.Namespace
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
				t.Fatalf("publish: %v", err)
			}
			setPhase(t, w, corev1.PodRunning)
			target := req.TargetPath
			harness.Must(t, os.WriteFile(filepath.Join(target, "before"), []byte("before"), 0o644))

			killed := killMountS3(t, bucket)
			harness.Eventually(t, 10*time.Second, func() string {
				var st syscall.Statfs_t
				if err := syscall.Statfs(target, &st); err == nil {
					return "the mount still answers"
				}
				return ""
			})
			if got := podEventReasons(t, w); len(got) != 0 {
				t.Fatalf("events before any republish (the monitor is off): %v", got)
			}
			if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
				t.Fatalf("republish of the dead mount: %v", err)
			}
			if pids := harness.MountS3PIDs(bucket); len(pids) == 0 || slices.ContainsFunc(pids, func(p int) bool { return slices.Contains(killed, p) }) {
				t.Errorf("mount-s3 after the republish: %v (killed: %v)", pids, killed)
			}
			harness.Must(t, os.WriteFile(filepath.Join(target, "after"), []byte("after"), 0o644))
			harness.Eventually(t, 20*time.Second, func() string {
				got := podEventReasons(t, w)
				for _, want := range []string{"MountDead", "MountRepaired", "MountRecoveryRestartedPod"} {
					if !slices.Contains(got, want) {
						return fmt.Sprintf("events on the workload %v, want MountDead, MountRepaired and MountRecoveryRestartedPod", got)
					}
				}
				return ""
			})
			var cur corev1.Pod
			if err := kube.Client.Get(context.Background(), client.ObjectKeyFromObject(w), &cur); err == nil && cur.DeletionTimestamp == nil {
				t.Errorf("restart-pod reported, but the workload pod is not being deleted")
			}
			for _, key := range []string{"before", "after"} {
				if !c.s3.ObjectExists(t, bucket, key) {
					t.Errorf("object %s lost", key)
				}
			}
			n.unpublish(target)
			harness.Must(t, client.IgnoreNotFound(kube.Client.Delete(context.Background(), w, client.GracePeriodSeconds(0))))
			if mode == mountmode.Pod {
				n.waitRetired()
			} else if u := n.unitOf(target); u != "" {
				t.Errorf("unit %s left after the unpublish", u)
			}
		})
	}
}

// blindWorkload creates a pod on the node, owned by a (nonexistent) ReplicaSet, whose container
// mounts the PV's claim without mount propagation: it cannot see a repaired mount.
func blindWorkload(t *testing.T, n *node, name string, pv *corev1.PersistentVolume) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.c.ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: types.UID("00000000-0000-0000-0000-00000000beef"), Controller: ptr.To(true),
		}}},
		Spec: corev1.PodSpec{
			NodeName:   n.name,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pv.Spec.ClaimRef.Name}}}},
		},
	}
	harness.Must(t, kube.Client.Create(context.Background(), p))
	return p
}

// podEventReasons returns the reasons of the Events on pod p.
func podEventReasons(t *testing.T, p *corev1.Pod) []string {
	t.Helper()
	var list corev1.EventList
	harness.Must(t, kube.Client.List(context.Background(), &list, client.InNamespace(p.Namespace)))
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == p.Name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// killMountS3 kills (-9) every mount-s3 serving bucket and returns their pids.
func killMountS3(t *testing.T, bucket string) []int {
	t.Helper()
	pids := harness.MountS3PIDs(bucket)
	if len(pids) == 0 {
		t.Fatalf("no mount-s3 serves bucket %s", bucket)
	}
	for _, pid := range pids {
		harness.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	return pids
}
