package pod

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// TestExitWatch: a mount.err written in a Running Mountpoint Pod's comm directory calls changed
// at once; other files do not; once the pod is gone its directory is no longer watched.
func TestExitWatch(t *testing.T) {
	kubelet := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mp-a", UID: "uid-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	comm := podcontract.CommHostPath(kubelet, pod.UID)
	calls := make(chan struct{}, 10)
	e, err := NewExitWatch(kubelet, func() { calls <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	// Not there yet: tried again at the next event.
	e.Observe(pod.Name, pod)
	if err := os.MkdirAll(comm, 0o750); err != nil {
		t.Fatal(err)
	}
	e.Observe(pod.Name, pod)
	expect := func(want bool, what string) {
		t.Helper()
		select {
		case <-calls:
			if !want {
				t.Errorf("changed called after %s", what)
			}
		case <-time.After(300 * time.Millisecond):
			if want {
				t.Errorf("changed not called after %s", what)
			}
		}
	}
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(comm, name), []byte("mount-s3 exited"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("credentials")
	expect(false, "another file was written")
	write(commError)
	expect(true, "mount.err was written")
	// One write makes several events (create, modify, close): let them all arrive, on a busy
	// machine too, before the pod goes.
	for quiet := time.After(500 * time.Millisecond); ; {
		select {
		case <-calls:
			quiet = time.After(500 * time.Millisecond)
			continue
		case <-quiet:
		}
		break
	}
	e.Observe(pod.Name, nil)
	if err := os.Remove(filepath.Join(comm, commError)); err != nil {
		t.Fatal(err)
	}
	write(commError)
	expect(false, "the pod is gone")
}
