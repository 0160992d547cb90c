package mounter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/mountertest"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
)

// routerFixture builds a Router over real target directories and a synthetic mount table in
// which "sys" holds a direct mount-s3 mount and "pod" a bind of a pod-mode shared mount.
func routerFixture(t *testing.T, mode *mountmode.Mode) (*mounter.Router, *mountertest.Fake, *mountertest.Fake, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	targets := map[string]string{}
	for _, n := range []string{"sys", "pod", "empty", "foreign"} {
		targets[n] = filepath.Join(dir, "pods", n, "mount")
		if err := os.MkdirAll(targets[n], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(dir, "plugins", "s3.csi.scality.com", "mnt", "mp-x")
	info := fmt.Sprintf(`1 0 8:1 / / rw - ext4 /dev/vda rw
10 1 0:40 / %[1]s rw - fuse mountpoint-s3 rw
14 10 0:40 / %[1]s rw - fuse mountpoint-s3 rw
11 1 0:41 / %[2]s rw - fuse mountpoint-s3 rw
12 1 0:41 / %[3]s rw - fuse mountpoint-s3 rw
15 12 0:41 / %[3]s rw - fuse mountpoint-s3 rw
13 1 0:42 / %[4]s rw - tmpfs tmpfs rw
`, targets["sys"], src, targets["pod"], targets["foreign"]) // each target two binds, as published
	p := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(p, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, pod := &mountertest.Fake{}, &mountertest.Fake{}
	r := mounter.NewRouterWithTable(sys, pod, nil, func() mountmode.Mode { return *mode }, filepath.Dir(src), p)
	return r, sys, pod, targets
}

func TestRouterRoutesByWhatIsMounted(t *testing.T) {
	mode := mountmode.Pod
	r, sys, pod, tg := routerFixture(t, &mode)
	ctx := context.Background()
	for name, want := range map[string]mountmode.Mode{"sys": mountmode.Systemd, "pod": mountmode.Pod} {
		if m, mounted, err := r.Classify(tg[name]); err != nil || !mounted || m != want {
			t.Errorf("Classify(%s) = %s %v %v, want %s", name, m, mounted, err, want)
		}
	}
	if _, mounted, _ := r.Classify(tg["foreign"]); mounted {
		t.Error("a tmpfs counted as a mount-s3 mount")
	}
	// The node is in pod mode, yet a republish of the systemd mount goes to systemd mode.
	must(t, r.Mount(ctx, mounter.Request{VolumeID: "v", Target: tg["sys"]}))
	must(t, r.Mount(ctx, mounter.Request{VolumeID: "v", Target: tg["pod"]}))
	must(t, r.Mount(ctx, mounter.Request{VolumeID: "v", Target: tg["empty"]})) // new: current mode
	mode = mountmode.Systemd
	must(t, r.Unmount(ctx, tg["pod"]))   // the node switched back; the pod mount still goes to pod mode
	must(t, r.Unmount(ctx, tg["empty"])) // no mount, no systemd state: the router removes it
	if _, err := os.Stat(tg["empty"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an empty unmounted target was not removed: %v", err)
	}
	if got := sys.Calls(); fmt.Sprint(got) != fmt.Sprint([]string{"mount " + tg["sys"]}) {
		t.Errorf("systemd calls = %v", got)
	}
	if got := pod.Calls(); fmt.Sprint(got) != fmt.Sprint([]string{"mount " + tg["pod"], "mount " + tg["empty"], "unmount " + tg["pod"]}) {
		t.Errorf("pod calls = %v", got)
	}
	counts, err := r.Counts(filepath.Dir(filepath.Dir(tg["sys"])))
	if err != nil || counts[mountmode.Systemd] != 1 || counts[mountmode.Pod] != 1 {
		t.Errorf("Counts = %v, %v; want one of each", counts, err)
	}
}

// leftoverFake is a Fake that reports state for the targets in left.
type leftoverFake struct {
	mountertest.Fake
	left map[string]bool
}

func (f *leftoverFake) HasLeftovers(target string) bool { return f.left[target] }

// TestRouterUnmountWithoutMount: a target with no mount-s3 mount goes to systemd mode only when
// systemd mode holds state for it; otherwise the router removes it itself, on any node (also
// one without systemd or pod mode), and never touches a mount that is not mount-s3's.
func TestRouterUnmountWithoutMount(t *testing.T) {
	mode := mountmode.Systemd
	r, _, pod, tg := routerFixture(t, &mode)
	ctx := context.Background()
	if err := r.Unmount(ctx, tg["foreign"]); !errors.Is(err, mounter.ErrTargetInUse) {
		t.Errorf("Unmount of a tmpfs = %v, want ErrTargetInUse", err)
	}
	must(t, r.Unmount(ctx, filepath.Join(filepath.Dir(tg["empty"]), "never-created")))

	// A systemd mounter with leftovers for the target gets the call.
	sys := &leftoverFake{left: map[string]bool{tg["empty"]: true}}
	dir := filepath.Dir(filepath.Dir(filepath.Dir(tg["empty"])))
	r2 := mounter.NewRouterWithTable(sys, pod, nil, func() mountmode.Mode { return mode }, filepath.Join(dir, "plugins", "s3.csi.scality.com", "mnt"), filepath.Join(dir, "mountinfo"))
	must(t, r2.Unmount(ctx, tg["empty"]))
	if got := sys.Calls(); fmt.Sprint(got) != fmt.Sprint([]string{"unmount " + tg["empty"]}) {
		t.Errorf("systemd calls = %v, want the unmount of the target it holds state for", got)
	}

	// A pod-only node (no systemd mounter) and a systemd-only node (no pod mounter) both clear
	// an empty target without calling anything.
	for _, tc := range []struct {
		name     string
		sys, pod mounter.Mounter
	}{{"pod only", nil, &mountertest.Fake{}}, {"systemd only", &mountertest.Fake{}, nil}} {
		target := filepath.Join(dir, "pods", tc.name, "mount")
		must(t, os.MkdirAll(target, 0o755))
		r3 := mounter.NewRouterWithTable(tc.sys, tc.pod, map[mountmode.Mode]string{mountmode.Systemd: "off", mountmode.Pod: "off"},
			func() mountmode.Mode { return mountmode.Pod }, filepath.Join(dir, "plugins", "s3.csi.scality.com", "mnt"), filepath.Join(dir, "mountinfo"))
		must(t, r3.Unmount(ctx, target))
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: target not removed: %v", tc.name, err)
		}
	}
	// A non-empty target is left as it is (never removed recursively).
	target := filepath.Join(dir, "pods", "full", "mount")
	must(t, os.MkdirAll(target, 0o755))
	must(t, os.WriteFile(filepath.Join(target, "f"), nil, 0o644))
	must(t, r.Unmount(ctx, target))
	if _, err := os.Stat(filepath.Join(target, "f")); err != nil {
		t.Errorf("a file in an unmounted target was removed: %v", err)
	}
}

func TestRouterReportsUnavailableMode(t *testing.T) {
	dir := t.TempDir()
	r := mounter.NewRouter(&mountertest.Fake{}, nil, map[mountmode.Mode]string{mountmode.Pod: "no access to the Kubernetes API"},
		func() mountmode.Mode { return mountmode.Pod }, filepath.Join(dir, "mnt"))
	err := r.Mount(context.Background(), mounter.Request{Target: filepath.Join(dir, "t")})
	if !errors.Is(err, mounter.ErrUnavailable) || !errorContains(err, "no access to the Kubernetes API") {
		t.Fatalf("err = %v, want ErrUnavailable with the reason", err)
	}
}

func errorContains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// recorder is a Fake that keeps records like the real modes (Repairer): a target is recorded
// while mounted.
type recorder struct{ mountertest.Fake }

func (r *recorder) Targets() []mounter.Target { return nil }
func (r *recorder) Recorded(target string) bool {
	_, ok := r.Mounted(target)
	return ok
}
func (r *recorder) Repair(context.Context, string) (bool, error) { return false, nil }

// TestRouterAfterReboot: every mount died with the node, the modes' records stayed. A
// republish goes to the mode that records the target, whatever the node's mode now; an
// unpublish clears the records of every mode, also of a target mounted by both (a dead mount of
// one mode replaced by the other's), and the other modes' state never outlives the workload.
func TestRouterAfterReboot(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "pods", "w", "mount")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	sys, pod := &recorder{}, &recorder{}
	mode := mountmode.Systemd
	r := mounter.NewRouterWithTable(sys, pod, nil, func() mountmode.Mode { return mode }, filepath.Join(dir, "mnt"), info)
	ctx := context.Background()
	req := mounter.Request{VolumeID: "v", Target: target}
	must(t, pod.Mount(ctx, req)) // pod mode published it before the reboot
	must(t, r.Mount(ctx, req))   // kubelet's publish after it: nothing mounted, node in systemd mode
	if calls := sys.Calls(); len(calls) != 0 {
		t.Errorf("systemd mode got %v; the target is pod mode's", calls)
	}
	if calls := pod.Calls(); len(calls) != 2 {
		t.Errorf("pod mode calls %v, want the republish", calls)
	}
	must(t, sys.Mount(ctx, req)) // both record it
	must(t, r.Unmount(ctx, target))
	if sys.Recorded(target) || pod.Recorded(target) {
		t.Errorf("records left after the unpublish: systemd %v, pod %v", sys.Recorded(target), pod.Recorded(target))
	}
}

// TestRouterUnmountClearsOtherModes: a target whose live mount one mode made while the other
// still records it (the other's mount died and was replaced) is unpublished through the mode that
// made the mount, and the other mode's record goes too.
func TestRouterUnmountClearsOtherModes(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "pods", "w", "mount")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(dir, "mountinfo")
	table := "1 0 8:1 / / rw - ext4 /dev/vda rw\n10 1 0:40 / " + target + " rw - fuse mountpoint-s3 rw\n"
	if err := os.WriteFile(info, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	sys, pod := &recorder{}, &recorder{}
	r := mounter.NewRouterWithTable(sys, pod, nil, func() mountmode.Mode { return mountmode.Pod }, filepath.Join(dir, "mnt"), info)
	ctx := context.Background()
	req := mounter.Request{VolumeID: "v", Target: target}
	must(t, sys.Mount(ctx, req))
	must(t, pod.Mount(ctx, req))
	must(t, r.Unmount(ctx, target))
	if sys.Recorded(target) || pod.Recorded(target) {
		t.Errorf("records left after the unpublish: systemd %v, pod %v", sys.Recorded(target), pod.Recorded(target))
	}
}

// TestRouterFallsBackToSystemd: a new pod-mode mount whose Mountpoint Pod cannot be placed
// (ErrUnplaceable) is mounted through systemd mode and reported; the target then stays systemd
// mode's (a republish after its mount died goes to systemd mode, even on a pod-mode node); a
// target pod mode records never falls back, nor does any other pod-mode error, nor a node
// without systemd mode.
func TestRouterFallsBackToSystemd(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(info, []byte("1 0 8:1 / / rw - ext4 /dev/vda rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := func(n string) string {
		p := filepath.Join(dir, "pods", n, "mount")
		must(t, os.MkdirAll(p, 0o755))
		return p
	}
	unplaceable := fmt.Errorf("%w: Mountpoint Pod mount-s3/mp-1 has not been scheduled for 30s: Unschedulable: 0/1 nodes are available", mounter.ErrUnplaceable)
	sys, pod := &recorder{}, &recorder{}
	podErr := unplaceable
	pod.MountHook = func(context.Context, mounter.Request) error { return podErr }
	r := mounter.NewRouterWithTable(sys, pod, nil, func() mountmode.Mode { return mountmode.Pod }, filepath.Join(dir, "mnt"), info)
	var reported []string
	r.SetFallbackReport(func(tg mounter.Target, why error) {
		reported = append(reported, tg.Path+": "+why.Error())
	})
	ctx := context.Background()

	a := mounter.Request{VolumeID: "v", Target: target("a"), PVName: "pv", WorkloadPodUID: "uid-a"}
	must(t, r.Mount(ctx, a))
	if _, ok := sys.Mounted(a.Target); !ok {
		t.Fatalf("not mounted through systemd mode; systemd calls %v", sys.Calls())
	}
	if len(reported) != 1 || !strings.Contains(reported[0], "has not been scheduled") {
		t.Errorf("fallback reports %q, want one naming the scheduler's refusal", reported)
	}
	// The mount died (nothing in the table), the node is still in pod mode, the pod would now
	// be placed: the republish stays in systemd mode.
	podErr = nil
	must(t, r.Mount(ctx, a))
	if calls := pod.Calls(); len(calls) != 0 {
		t.Errorf("pod mode got %v for a target systemd mode records", calls)
	}

	// A target pod mode records keeps pod mode: no fallback, the error is returned.
	b := mounter.Request{VolumeID: "v", Target: target("b"), PVName: "pv", WorkloadPodUID: "uid-b"}
	must(t, pod.Mount(ctx, b))
	podErr = unplaceable
	if err := r.Mount(ctx, b); !errors.Is(err, mounter.ErrUnplaceable) {
		t.Errorf("republish of a pod-mode target: %v, want ErrUnplaceable", err)
	}
	if _, ok := sys.Mounted(b.Target); ok {
		t.Error("a target pod mode records fell back to systemd mode")
	}

	// Any other pod-mode error is returned as is.
	podErr = fmt.Errorf("%w: the Kubernetes API does not answer", mounter.ErrUnavailable)
	c := mounter.Request{VolumeID: "v", Target: target("c"), PVName: "pv", WorkloadPodUID: "uid-c"}
	if err := r.Mount(ctx, c); !errors.Is(err, mounter.ErrUnavailable) {
		t.Errorf("pod-mode failure: %v, want it returned", err)
	}
	if _, ok := sys.Mounted(c.Target); ok {
		t.Error("an ordinary pod-mode failure fell back to systemd mode")
	}

	// A failed fallback names both failures.
	podErr = unplaceable
	sys.MountHook = func(context.Context, mounter.Request) error {
		return fmt.Errorf("%w: systemd did not answer", mounter.ErrUnavailable)
	}
	err := r.Mount(ctx, c)
	if !errors.Is(err, mounter.ErrUnplaceable) || !errors.Is(err, mounter.ErrUnavailable) || !strings.Contains(err.Error(), "fallback to systemd mode failed") {
		t.Errorf("failed fallback: %v", err)
	}

	// Without systemd mode on the node, the refusal is returned.
	r2 := mounter.NewRouterWithTable(nil, pod, map[mountmode.Mode]string{mountmode.Systemd: "off"}, func() mountmode.Mode { return mountmode.Pod }, filepath.Join(dir, "mnt"), info)
	if err := r2.Mount(ctx, mounter.Request{VolumeID: "v", Target: target("d"), PVName: "pv", WorkloadPodUID: "uid-d"}); !errors.Is(err, mounter.ErrUnplaceable) {
		t.Errorf("no systemd mode: %v, want ErrUnplaceable", err)
	}
	if len(reported) != 1 {
		t.Errorf("fallback reports %q, want only the first", reported)
	}
}
