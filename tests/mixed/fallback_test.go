package mixed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestFallbackToSystemd: on a pod-mode node whose plugin runs with --systemd-fallback-after, a
// volume whose Mountpoint Pod the scheduler refuses is mounted through systemd mode once the
// bound has passed: a unit serves it, data reaches the bucket, and a Warning Event
// MountedThroughSystemd on the workload names the scheduler's reason. The controller then
// detaches the running workload and deletes the Mountpoint Pod that never ran. The volume keeps
// systemd mode when its mount-s3 dies and is repaired, and when republished after the node has
// room again; the workload's next pod gets a Mountpoint Pod. Nothing is left at the end.
func TestFallbackToSystemd(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "fallback")
	pv := c.volume("fallback", "fallback")
	n := c.node("fb", nodeOpts{args: []string{"--systemd-fallback-after=3s", "--health-check-interval=1s"}})
	n.waitEffective(mountmode.Pod)
	n.mk.RefuseScheduling("0/1 nodes are available: 1 Insufficient memory.")

	start := time.Now() // before the workload, so before the scheduler's refusal the bound counts from
	w := n.workload("w", pv)
	req := n.publishReq(w, pv, "")
	req.VolumeContext["csi.storage.k8s.io/pod.name"] = w.Name
	req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = w.Namespace
	target := req.TargetPath
	publish := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := n.drv.Node.NodePublishVolume(ctx, req); err != nil {
			t.Fatalf("NodePublishVolume: %v", err)
		}
	}
	publish()
	// The API keeps the condition's time to the second: the bound is 3s, less up to 1s.
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("the publish fell back %v after the workload was created, before the 3s bound", took)
	}
	if m := n.modeOf(target); m != mountmode.Systemd || n.unitOf(target) == "" {
		t.Fatalf("mounted in %q mode (unit %q), want systemd", m, n.unitOf(target))
	}
	harness.Must(t, os.WriteFile(filepath.Join(target, "fell-back.txt"), []byte("systemd"), 0o644))
	if got := c.s3.GetObject(t, "fallback", "fell-back.txt"); string(got) != "systemd" {
		t.Errorf("object = %q", got)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		msg := eventMessage(t, w, "MountedThroughSystemd")
		for _, want := range []string{"PersistentVolume " + pv.Name + " is mounted through systemd mode", "has not been scheduled for 3s", "Insufficient memory", "until this pod is recreated"} {
			if !strings.Contains(msg, want) {
				return fmt.Sprintf("Event MountedThroughSystemd %q lacks %q (events: %v)", msg, want, podEventReasons(t, w))
			}
		}
		return ""
	})

	// Kubelet reports the workload Running: it no longer waits for the Mountpoint Pod, which
	// never ran and goes.
	setPhase(t, w, corev1.PodRunning)
	harness.Eventually(t, 20*time.Second, func() string {
		if p := n.mountpointPods(); len(p) != 0 {
			return fmt.Sprintf("Mountpoint Pod %s left (%s)", p[0].Name, p[0].Status.Phase)
		}
		if a := n.attachments(); len(a) != 0 {
			return fmt.Sprintf("attachments left: %v", attachedUIDs(a))
		}
		return ""
	})

	// mount-s3 dies: the monitor repairs the mount in systemd mode.
	killMountS3(t, "fallback")
	harness.Eventually(t, 20*time.Second, func() string {
		got, err := os.ReadFile(filepath.Join(target, "fell-back.txt"))
		if err != nil || string(got) != "systemd" {
			return fmt.Sprintf("read after the kill: %q %v", got, err)
		}
		return ""
	})
	if m := n.modeOf(target); m != mountmode.Systemd || n.unitOf(target) == "" {
		t.Errorf("repaired in %q mode (unit %q), want systemd", m, n.unitOf(target))
	}

	// The node has room again: the volume still keeps systemd mode for this pod.
	n.mk.RefuseScheduling("")
	publish()
	if m := n.modeOf(target); m != mountmode.Systemd {
		t.Errorf("republished in %q mode, want systemd for the workload's life", m)
	}
	if p := n.mountpointPods(); len(p) != 0 {
		t.Errorf("the republish made Mountpoint Pod %s", p[0].Name)
	}

	// The workload's next pod gets the node's mode.
	next := n.workload("w-next", pv)
	tn := n.publish(next, pv)
	if m := n.modeOf(tn); m != mountmode.Pod {
		t.Errorf("the next pod mounted in %q mode, want pod", m)
	}
	if got, err := os.ReadFile(filepath.Join(tn, "fell-back.txt")); err != nil || string(got) != "systemd" {
		t.Errorf("the next pod reads %q %v", got, err)
	}

	n.unpublish(target)
	if u := n.unitOf(target); u != "" || len(harness.MountsBelow(target)) != 0 {
		t.Errorf("unit %q or mounts left after the unpublish", u)
	}
	n.unpublish(tn)
	deletePod(t, w)
	deletePod(t, next)
	n.waitRetired()
}

// eventMessage returns the message of the newest Event with reason on pod p ("" when none).
func eventMessage(t *testing.T, p *corev1.Pod, reason string) string {
	t.Helper()
	var list corev1.EventList
	harness.Must(t, kube.Client.List(context.Background(), &list, client.InNamespace(p.Namespace)))
	msg := ""
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == p.Name && e.Reason == reason {
			msg = e.Message
		}
	}
	return msg
}
