package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// unmounterRig is a rig whose Mountpoint Pod mp-a serves w1 through a published target.
func unmounterRig(t *testing.T) (*rig, *Unmounter, *corev1.Pod, string) {
	r := newRig(t)
	pod := r.mountpointPod("mp-a", "w1")
	u := NewUnmounter(r.m, time.Hour)
	target := r.target("w1")
	if err := r.m.Mount(context.Background(), request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	r.k.took()
	return r, u, pod, target
}

func (r *rig) markNeedsUnmount(name string) {
	r.c.mu.Lock()
	r.c.pods[name].Annotations[podcontract.AnnotationNeedsUnmount] = "true"
	r.c.mu.Unlock()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestUnmounterLeavesAServingPodAlone(t *testing.T) {
	r, u, pod, _ := unmounterRig(t)
	if err := u.handle(context.Background(), "mp-a"); err != nil {
		t.Fatal(err)
	}
	if calls := r.k.took(); len(calls) != 0 {
		t.Errorf("a Mountpoint Pod not marked needs-unmount was touched: %v", calls)
	}
	if exists(filepath.Join(r.m.paths.comm(pod.UID), mountoptions.ExitFileName)) {
		t.Error("mount.exit written")
	}
}

func TestUnmounterWaitsForWorkloadBinds(t *testing.T) {
	r, u, pod, target := unmounterRig(t)
	r.markNeedsUnmount("mp-a")
	ctx := context.Background()
	if err := u.handle(ctx, "mp-a"); err != nil {
		t.Fatal(err)
	}
	if calls := r.k.took(); len(calls) != 0 {
		t.Errorf("the shared mount of a pod still bound by a workload was touched: %v", calls)
	}
	// A copy of the shared mount outside kubelet's pods directory (the node plugin's own /csi
	// view after a restart) is not a workload.
	source := r.m.paths.source("mp-a")
	r.k.mu.Lock()
	top, _ := r.k.top(source)
	top.point = filepath.Join(r.kubelet, "csi-view", "mp-a")
	r.k.add(top)
	r.k.mu.Unlock()
	if err := r.m.Unmount(ctx, target); err != nil {
		t.Fatal(err)
	}
	r.k.took()
	if err := u.handle(ctx, "mp-a"); err != nil {
		t.Fatal(err)
	}
	comm := r.m.paths.comm(pod.UID)
	if !exists(filepath.Join(comm, mountoptions.ExitFileName)) {
		t.Error("mount.exit not written")
	}
	calls := r.k.took()
	if !slices.Contains(calls, "unmount "+source+" plain") || !slices.Contains(calls, "unmount "+top.point+" detach") {
		t.Errorf("kernel calls = %v, want the shared mount and its copy removed", calls)
	}
	if got := r.k.at(source); len(got) != 0 {
		t.Errorf("shared mount left: %v", got)
	}
	if exists(source) || exists(r.m.paths.sourceRecord("mp-a")) {
		t.Error("source directory or record left")
	}
	if exists(filepath.Join(comm, commCredentials, credentials.CredentialsFileName)) {
		t.Error("credentials left in the comm directory")
	}
}

func TestUnmounterRemovesMountsOfPodsThatAreGone(t *testing.T) {
	r, u, _, _ := unmounterRig(t)
	r.c.mu.Lock()
	delete(r.c.pods, "mp-a")
	r.c.mu.Unlock()
	u.Sweep(context.Background())
	source := r.m.paths.source("mp-a")
	if got := r.k.at(source); len(got) != 0 {
		t.Errorf("shared mount of a deleted pod left: %v", got)
	}
	if exists(source) || exists(r.m.paths.sourceRecord("mp-a")) {
		t.Error("source directory or record left")
	}
}

func TestUnmounterIgnoresFinishedPods(t *testing.T) {
	r, u, _, _ := unmounterRig(t)
	r.markNeedsUnmount("mp-a")
	r.c.mu.Lock()
	r.c.pods["mp-a"].Status.Phase = corev1.PodSucceeded
	r.c.mu.Unlock()
	if err := u.handle(context.Background(), "mp-a"); err != nil {
		t.Fatal(err)
	}
	if calls := r.k.took(); len(calls) != 0 {
		t.Errorf("a finished pod was handled again: %v", calls)
	}
}

func TestUnmounterRefusesALinkedCommDir(t *testing.T) {
	r, u, pod, target := unmounterRig(t)
	ctx := context.Background()
	if err := r.m.Unmount(ctx, target); err != nil {
		t.Fatal(err)
	}
	r.markNeedsUnmount("mp-a")
	// A compromised Mountpoint Pod replaced its mount.exit by a link to a host file.
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(r.m.paths.comm(pod.UID), mountoptions.ExitFileName)); err != nil {
		t.Fatal(err)
	}
	_ = u.handle(ctx, "mp-a")
	if b, err := os.ReadFile(outside); err != nil || string(b) != "host" {
		t.Errorf("the host file behind the link changed: %q %v", b, err)
	}
	if _, err := os.Lstat(outside); errors.Is(err, os.ErrNotExist) {
		t.Error("the host file was removed")
	}
}

func TestUnmounterEnqueuesOnEvents(t *testing.T) {
	r, u, _, _ := unmounterRig(t)
	if len(r.c.onPod) != 1 {
		t.Fatalf("%d pod handlers registered, want 1", len(r.c.onPod))
	}
	r.c.onPod[0]("mp-a", nil)
	r.m.unbound("mp-b")
	var got []string
	for len(got) < 2 {
		select {
		case mp := <-u.work:
			got = append(got, mp)
		case <-time.After(time.Second):
			t.Fatalf("queued %v, want mp-a and mp-b", got)
		}
	}
	if !slices.Equal(got, []string{"mp-a", "mp-b"}) {
		t.Errorf("queued %v", got)
	}
}
