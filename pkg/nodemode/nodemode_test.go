package nodemode

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeCore is the fake clientset's core client, saying, as the fake clientset does, that it
// cannot stream an initial list (the informer lists instead).
type fakeCore struct{ typedcorev1.CoreV1Interface }

func (fakeCore) IsWatchListSemanticsUnSupported() bool { return true }

// TestWatcher: the label decides the node's mode (the default without one, the default and a
// warning for an invalid one), and the Node is annotated with the effective mode.
func TestWatcher(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{mountmode.Label: "pod"}}}
	cs := fake.NewClientset(node)
	w := New(fakeCore{cs.CoreV1()}, "n1", mountmode.Systemd)
	if w.Mode() != mountmode.Systemd {
		t.Fatalf("before Start: %s, want the default", w.Mode())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	annotated := func(want mountmode.Mode) func() bool {
		return func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			return err == nil && n.Annotations[AnnotationEffectiveMode] == string(want)
		}
	}
	waitFor(t, "mode pod", func() bool { return w.Mode() == mountmode.Pod })
	waitFor(t, "annotation pod", annotated(mountmode.Pod))
	for _, step := range []struct {
		label string
		want  mountmode.Mode
	}{{"systemd", mountmode.Systemd}, {"pod", mountmode.Pod}, {"bogus", mountmode.Systemd}, {"pod", mountmode.Pod}, {"", mountmode.Systemd}} {
		label, want := step.label, step.want
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if label == "" {
			delete(n.Labels, mountmode.Label)
		} else {
			n.Labels[mountmode.Label] = label
		}
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "mode "+string(want)+" for label "+label, func() bool { return w.Mode() == want })
		waitFor(t, "annotation "+string(want), annotated(want))
	}
}

// TestRemoveStartupTaint: the taint goes only once kubelet registered the driver (CSINode), and
// every other taint stays.
func TestRemoveStartupTaint(t *testing.T) {
	other := corev1.Taint{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: TaintAgentNotReady, Effect: corev1.TaintEffectNoExecute}, other}}}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	cs := fake.NewClientset(node, csiNode)
	ctx := context.Background()
	if done, err := removeTaintOnce(ctx, cs, "n1"); done || err == nil {
		t.Fatalf("removed before registration: %v %v", done, err)
	}
	csiNode.Spec.Drivers = []storagev1.CSINodeDriver{{Name: version.DriverName, NodeID: "n1"}}
	if _, err := cs.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := RemoveStartupTaint(ctx, cs, "n1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != other {
		t.Errorf("taints after removal = %v, want only %v", n.Spec.Taints, other)
	}
	if done, err := removeTaintOnce(ctx, cs, "n1"); !done || err != nil {
		t.Errorf("a node without the taint: %v %v, want done", done, err)
	}
}
