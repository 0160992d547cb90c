package mixed

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestMixedCluster: a bare-metal node labelled systemd (no Mountpoint Pods possible, no access to
// the Mountpoint namespace) and a pod-mode node mount the same bucket and see each other's data.
func TestMixedCluster(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "shared")
	pv := c.volume("shared", "shared")
	metal := c.node("metal", nodeOpts{label: "systemd", noPodAccess: true, noKubelet: true})
	podNode := c.node("pod", nodeOpts{})
	metal.waitEffective(mountmode.Systemd)
	podNode.waitEffective(mountmode.Pod)

	wm, wp := metal.workload("on-metal", pv), podNode.workload("on-pod", pv)
	tm, tp := metal.publish(wm, pv), podNode.publish(wp, pv)
	if m := metal.modeOf(tm); m != mountmode.Systemd || metal.unitOf(tm) == "" {
		t.Fatalf("metal node mounted in %q mode (unit %q), want systemd", m, metal.unitOf(tm))
	}
	if m := podNode.modeOf(tp); m != mountmode.Pod {
		t.Fatalf("pod node mounted in %q mode, want pod", m)
	}
	harness.Must(t, os.WriteFile(filepath.Join(tm, "from-metal.txt"), []byte("metal"), 0o644))
	harness.Must(t, os.WriteFile(filepath.Join(tp, "from-pod.txt"), []byte("pod"), 0o644))
	harness.Eventually(t, 10*time.Second, func() string {
		a, errA := os.ReadFile(filepath.Join(tp, "from-metal.txt"))
		b, errB := os.ReadFile(filepath.Join(tm, "from-pod.txt"))
		if string(a) != "metal" || string(b) != "pod" {
			return fmt.Sprintf("cross reads: %q %v / %q %v", a, errA, b, errB)
		}
		return ""
	})
	if p := metal.mountpointPods(); len(p) != 0 {
		t.Errorf("%d Mountpoint Pods for the systemd node", len(p))
	}
	if a := metal.attachments(); len(a) != 0 {
		t.Errorf("attachments for the systemd node: %v", a)
	}
	if !strings.Contains(metal.drv.Log(), "Pod mode is unavailable") {
		t.Error("the bare-metal node did not report pod mode unavailable (it has no access to the Mountpoint namespace)")
	}
	metal.unpublish(tm)
	podNode.unpublish(tp)
	if metal.unitOf(tm) != "" || len(harness.MountsBelow(tm)) != 0 || len(harness.MountsBelow(tp)) != 0 {
		t.Error("mounts or units left after unpublish")
	}
}

// TestPodMounterDisabled: the node plugin as the chart renders it when no node uses pod mode
// (--pod-mounter=false, no access to the Mountpoint namespace). It starts no pod-mode informers
// (so no forbidden errors and no start-up wait), a publish while the node's mode is pod fails
// with Unavailable saying why and leaves the target as it was, and systemd mode works.
func TestPodMounterDisabled(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "nopod")
	pv := c.volume("nopod", "nopod")
	n := c.node("nopod", nodeOpts{label: "systemd", noPodAccess: true, noKubelet: true, podMounter: "false"})
	n.waitEffective(mountmode.Systemd)

	w := n.workload("w", pv)
	target := n.publish(w, pv)
	if m := n.modeOf(target); m != mountmode.Systemd {
		t.Fatalf("mounted in %q mode, want systemd", m)
	}
	harness.Must(t, os.WriteFile(filepath.Join(target, "f.txt"), []byte("systemd"), 0o644))
	n.unpublish(target)
	if got := c.s3.GetObject(t, "nopod", "f.txt"); string(got) != "systemd" {
		t.Errorf("object = %q", got)
	}

	// A node moved to pod mode although the plugin runs without it.
	n.relabel("pod", mountmode.Pod)
	w2 := n.workload("w2", pv)
	req := n.publishReq(w2, pv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := n.drv.Node.NodePublishVolume(ctx, req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--pod-mounter=false") {
		t.Fatalf("publish in pod mode with pod mode disabled: %v, want Unavailable naming --pod-mounter=false", err)
	}
	if m := harness.MountsBelow(req.TargetPath); len(m) != 0 {
		t.Fatalf("mounts left after the refused publish: %v", m)
	}
	// A flag is not fixed by a restart: the plugin stays ready (its liveness probe must not
	// restart it in a loop).
	if resp, err := n.drv.Identity.Probe(ctx, &csi.ProbeRequest{}); err != nil || !resp.GetReady().GetValue() {
		t.Errorf("Probe with pod mode disabled on a pod-mode node: %v %v, want ready", resp, err)
	}
	log := n.drv.Log()
	for _, bad := range []string{"Pod mode is unavailable", "cannot list resource", "did not sync"} {
		if strings.Contains(log, bad) {
			t.Errorf("node log mentions %q: pod-mode informers ran although disabled\n%s", bad, tail(log, 30))
		}
	}
}

// TestMigrationSystemdToPod: workload A mounted in systemd mode keeps working across the relabel
// (its republish refreshes credentials through systemd), new workload B mounts through a
// Mountpoint Pod, A's unpublish stops its unit and leaves B intact.
func TestMigrationSystemdToPod(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "migrate")
	pv := c.volume("migrate", "migrate")
	n := c.node("n", nodeOpts{label: "systemd"})
	n.waitEffective(mountmode.Systemd)

	a := n.workload("a", pv)
	ta := n.publish(a, pv)
	setPhase(t, a, corev1.PodRunning)
	unit := n.unitOf(ta)
	pidBefore := mainPID(t, n, unit)
	if unit == "" || n.modeOf(ta) != mountmode.Systemd {
		t.Fatalf("A not mounted in systemd mode")
	}

	n.relabel("pod", mountmode.Pod)

	// A keeps reading and writing; its republish goes to systemd (new credentials are written in
	// the systemd credentials directory, the unit's mount-s3 keeps running).
	harness.Must(t, os.WriteFile(filepath.Join(ta, "a-after-relabel"), []byte("a"), 0o644))
	req := n.publishReq(a, pv, "")
	req.VolumeContext["authenticationSource"] = "secret"
	req.Secrets = map[string]string{"access_key_id": "ROTATEDKEY", "secret_access_key": "rotatedsecret"}
	if _, err := n.drv.Node.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatalf("republish of A after the relabel: %v", err)
	}
	creds, _ := filepathGlobOne(filepath.Join(n.drv.CredentialsDir(), "*", "credentials"))
	if b, _ := os.ReadFile(creds); !strings.Contains(string(b), "ROTATEDKEY") {
		t.Errorf("A's credentials were not refreshed through the systemd path")
	}
	if mainPID(t, n, unit) != pidBefore {
		t.Error("A's mount-s3 was restarted by the republish")
	}
	if p := n.mountpointPods(); len(p) != 0 {
		t.Errorf("a Mountpoint Pod was created for the already-mounted A")
	}

	b := n.workload("b", pv)
	tb := n.publish(b, pv)
	if n.modeOf(tb) != mountmode.Pod || len(n.mountpointPods()) != 1 {
		t.Fatalf("B mounted in %q mode with %d Mountpoint Pods, want pod and 1", n.modeOf(tb), len(n.mountpointPods()))
	}
	if !slices.Contains(attachedUIDs(n.attachments()), string(b.UID)) || slices.Contains(attachedUIDs(n.attachments()), string(a.UID)) {
		t.Errorf("attachments record %v; want B only", attachedUIDs(n.attachments()))
	}
	harness.Must(t, os.WriteFile(filepath.Join(tb, "b.txt"), []byte("b"), 0o644))

	n.unpublish(ta)
	if n.unitOf(ta) != "" {
		t.Error("A's unit still runs after its unpublish")
	}
	if got, err := os.ReadFile(filepath.Join(tb, "a-after-relabel")); err != nil || string(got) != "a" {
		t.Errorf("B lost data or broke after A's unpublish: %q %v", got, err)
	}
	for _, key := range []string{"a-after-relabel", "b.txt"} {
		if !c.s3.ObjectExists(t, "migrate", key) {
			t.Errorf("object %s lost", key)
		}
	}
	n.unpublish(tb)
	deletePod(t, a)
	deletePod(t, b)
	n.waitRetired()
}

// TestRollbackPodToSystemd: the mirror of the migration, including the retirement of the pod
// mount after the node is already in systemd mode.
func TestRollbackPodToSystemd(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "rollback")
	pv := c.volume("rollback", "rollback")
	n := c.node("n", nodeOpts{label: "pod"})
	n.waitEffective(mountmode.Pod)

	p := n.workload("p", pv)
	tp := n.publish(p, pv)
	setPhase(t, p, corev1.PodRunning)
	if n.modeOf(tp) != mountmode.Pod {
		t.Fatal("P not mounted in pod mode")
	}
	n.relabel("systemd", mountmode.Systemd)
	if _, err := n.drv.Node.NodePublishVolume(context.Background(), n.publishReq(p, pv, "")); err != nil {
		t.Fatalf("republish of P after the rollback: %v", err)
	}
	if n.modeOf(tp) != mountmode.Pod || n.unitOf(tp) != "" {
		t.Fatal("P's republish changed its mode")
	}
	s := n.workload("s", pv)
	ts := n.publish(s, pv)
	if n.modeOf(ts) != mountmode.Systemd || n.unitOf(ts) == "" {
		t.Fatalf("S mounted in %q mode, want systemd", n.modeOf(ts))
	}
	if len(n.mountpointPods()) != 1 {
		t.Errorf("%d Mountpoint Pods, want only P's", len(n.mountpointPods()))
	}
	harness.Must(t, os.WriteFile(filepath.Join(tp, "from-p"), []byte("p"), 0o644))
	harness.Eventually(t, 10*time.Second, func() string {
		if b, err := os.ReadFile(filepath.Join(ts, "from-p")); err != nil || string(b) != "p" {
			return fmt.Sprintf("S does not see P's write: %v", err)
		}
		return ""
	})
	// P leaves: the controller still maintains its attachment on the (now systemd) node, the
	// node still retires the pod mount.
	n.unpublish(tp)
	deletePod(t, p)
	n.waitRetired()
	harness.Must(t, os.WriteFile(filepath.Join(ts, "after-retire"), []byte("s"), 0o644))
	n.unpublish(ts)
	if !c.s3.ObjectExists(t, "rollback", "from-p") || !c.s3.ObjectExists(t, "rollback", "after-retire") {
		t.Error("objects lost")
	}
}

// TestRestartMidMigration: a node plugin restarted while it holds both kinds of mounts still
// recognises and cleans up each.
func TestRestartMidMigration(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "restart")
	pv := c.volume("restart", "restart")
	n := c.node("n", nodeOpts{label: "systemd"})
	n.waitEffective(mountmode.Systemd)
	a := n.workload("a", pv)
	ta := n.publish(a, pv)
	setPhase(t, a, corev1.PodRunning)
	n.relabel("pod", mountmode.Pod)
	b := n.workload("b", pv)
	tb := n.publish(b, pv)
	setPhase(t, b, corev1.PodRunning)

	n.drv.Kill()
	n.drv.Restart()
	n.waitEffective(mountmode.Pod)
	if n.modeOf(ta) != mountmode.Systemd || n.modeOf(tb) != mountmode.Pod {
		t.Fatalf("after the restart: A is %q, B is %q", n.modeOf(ta), n.modeOf(tb))
	}
	n.unpublish(ta)
	n.unpublish(tb)
	if n.unitOf(ta) != "" || len(harness.MountsBelow(ta))+len(harness.MountsBelow(tb)) != 0 {
		t.Fatal("mounts or units left")
	}
	deletePod(t, a)
	deletePod(t, b)
	n.waitRetired()
}

// TestInvalidLabelAndFlipsDuringBurst: an invalid label is reported on the Node and the default
// applies; flipping the label during a burst of publishes loses no mount, each target lands in
// exactly one mode (kubelet retries a publish that timed out), and nothing is orphaned.
func TestInvalidLabelAndFlipsDuringBurst(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "flips")
	n := c.node("n", nodeOpts{label: "Bogus"})
	n.waitEffective(mountmode.Pod) // the cluster default
	harness.Eventually(t, 10*time.Second, func() string {
		var events corev1.EventList
		harness.Must(t, kube.Client.List(context.Background(), &events))
		for _, e := range events.Items {
			if e.InvolvedObject.Name == n.name && e.Reason == nodemode.ReasonInvalidLabel && strings.Contains(e.Message, "Bogus") {
				return ""
			}
		}
		return "no invalid-label event on the Node"
	})

	const count = 12
	var pvs []*corev1.PersistentVolume
	var pods []*corev1.Pod
	for i := 0; i < count; i++ {
		pv := c.volume(fmt.Sprintf("v%d", i), "flips")
		pvs = append(pvs, pv)
		pods = append(pods, n.workload(fmt.Sprintf("w%d", i), pv))
	}
	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		labels := []string{"systemd", "pod", "nonsense", "systemd", "pod"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(70 * time.Millisecond):
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, mountmode.Label, labels[i%len(labels)])
			if err := patchNode(n.name, patch); err != nil {
				t.Errorf("relabel: %v", err)
			}
		}
	}()
	targets := make([]string, count)
	var wg sync.WaitGroup
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 60 * time.Millisecond) // spread over the flips
			req := n.publishReq(pods[i], pvs[i], "")
			targets[i] = req.TargetPath
			for attempt := 0; attempt < 10; attempt++ { // kubelet retries failed publishes
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := n.drv.Node.NodePublishVolume(ctx, req)
				cancel()
				if err == nil {
					return
				}
			}
			t.Errorf("publish %d never succeeded", i)
		}()
	}
	wg.Wait()
	close(stop)
	<-flipped
	modes := map[mountmode.Mode]int{}
	for i, tg := range targets {
		m := n.modeOf(tg)
		switch {
		case m == "":
			t.Errorf("target %d lost its mount", i)
		case m == mountmode.Systemd && n.unitOf(tg) == "":
			t.Errorf("target %d is a systemd mount without a unit", i)
		}
		harness.Must(t, os.WriteFile(filepath.Join(tg, "w"+strconv.Itoa(i)), []byte("x"), 0o644))
		modes[m]++
	}
	t.Logf("publishes by mode after the flips: %v", modes)
	if modes[mountmode.Systemd] == 0 || modes[mountmode.Pod] == 0 {
		t.Errorf("the flips did not spread the publishes over both modes (%v): the test proves nothing", modes)
	}
	for i, tg := range targets {
		n.unpublish(tg)
		deletePod(t, pods[i])
	}
	n.waitRetired()
	if units := n.sd.Units("mount-s3-*"); len(units) != 0 {
		t.Errorf("orphan units: %v", units)
	}
	if keys := c.s3.ListKeys(t, "flips"); len(keys) != count {
		t.Errorf("bucket holds %d objects, want %d", len(keys), count)
	}
}

// TestNodeMetrics: the node plugin's metrics report live mounts by the mode that made them and
// the mode new mounts use, so an operator can watch a migration finish.
func TestNodeMetrics(t *testing.T) {
	c := newCluster(t)
	c.s3.CreateBucket(t, "metrics")
	pv := c.volume("metrics", "metrics")
	n := c.node("n", nodeOpts{label: "systemd", metrics: true})
	n.waitEffective(mountmode.Systemd)
	a := n.workload("a", pv)
	ta := n.publish(a, pv)
	setPhase(t, a, corev1.PodRunning)
	n.relabel("pod", mountmode.Pod)
	b := n.workload("b", pv)
	tb := n.publish(b, pv)
	// Every sample carries the node's name (a scrape of many nodes tells them apart).
	node := `,node="` + n.name + `"}`
	want := []string{`s3csi_node_mounts{mode="systemd"` + node + ` 1`, `s3csi_node_mounts{mode="pod"` + node + ` 1`,
		`s3csi_node_mount_mode{mode="pod"` + node + ` 1`, `s3csi_node_mount_mode{mode="systemd"` + node + ` 0`,
		`s3csi_node_mount_mode_available{mode="pod"` + node + ` 1`, `s3csi_node_mount_mode_available{mode="systemd"` + node + ` 1`,
		`s3csi_node_mount_mode_label_invalid{node="` + n.name + `"} 0`}
	expectMetrics := func() {
		t.Helper()
		harness.Eventually(t, 10*time.Second, func() string {
			resp, err := http.Get(n.metricsURL)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			for _, w := range want {
				if !strings.Contains(string(body), w) {
					return fmt.Sprintf("metrics lack %s:\n%s", w, body)
				}
			}
			return ""
		})
	}
	expectMetrics()
	// A label that is not a mode: reported, and the cluster default (pod in this suite) applies.
	harness.Must(t, patchNode(n.name, `{"metadata":{"labels":{"s3.csi.scality.com/mounter":"pods"}}}`))
	want = []string{`s3csi_node_mount_mode_label_invalid{node="` + n.name + `"} 1`, `s3csi_node_mount_mode{mode="pod"` + node + ` 1`}
	expectMetrics()
	n.unpublish(ta)
	n.unpublish(tb)
}

func mainPID(t *testing.T, n *node, unit string) string {
	t.Helper()
	out, err := n.sd.Systemctl("show", "--property=MainPID", "--value", unit)
	if err != nil {
		t.Fatalf("systemctl show: %v %s", err, out)
	}
	return strings.TrimSpace(out)
}

func filepathGlobOne(pattern string) (string, error) {
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		return "", fmt.Errorf("%s: %d matches", pattern, len(m))
	}
	return m[0], nil
}

func patchNode(name, patch string) error {
	return kube.Client.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// TestStartupTaintRemoved: a node tainted s3.csi.scality.com/agent-not-ready loses that taint
// (and only that one) once kubelet has registered the driver on it (CSINode), not before.
func TestStartupTaintRemoved(t *testing.T) {
	c := newCluster(t)
	name := c.id + "-tainted"
	taints := []corev1.Taint{
		{Key: nodemode.TaintAgentNotReady, Effect: corev1.TaintEffectNoExecute},
		{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule},
	}
	harness.Must(t, kube.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}))
	kube.BindRBAC(t, "node-rbac.yaml", "system:node:"+name)
	drv := harness.StartDriver(t, harness.DriverOptions{KubeletDir: harness.NewKubeletDir(t), S3: c.s3, WithCredentials: true, NodeID: name,
		ExtraArgs: []string{"--default-mounter=pod", "--kubeconfig=" + kube.Kubeconfig(t, "system:node:"+name), "--api-timeout=3s", "--v=4"}})
	taintsOf := func() []string {
		var n corev1.Node
		harness.Must(t, kube.Client.Get(context.Background(), client.ObjectKey{Name: name}, &n))
		var keys []string
		for _, tn := range n.Spec.Taints {
			keys = append(keys, tn.Key)
		}
		return keys
	}
	// The plugin has looked at the node and found the driver not registered (kubelet has not
	// registered it yet): the taint must still be there.
	harness.Eventually(t, 30*time.Second, func() string {
		if !strings.Contains(drv.Log(), "Startup taint not removed yet") {
			return "the node plugin has not tried to remove the taint yet"
		}
		return ""
	})
	before := taintsOf() // the API server adds node.kubernetes.io/not-ready itself
	if !slices.Contains(before, nodemode.TaintAgentNotReady) {
		t.Fatal("taint removed before kubelet registered the driver")
	}
	// kubelet registers the plugin.
	harness.Must(t, kube.Client.Create(context.Background(), &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "s3.csi.scality.com", NodeID: name}}}}))
	harness.Eventually(t, 30*time.Second, func() string {
		got := taintsOf()
		want := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return k == nodemode.TaintAgentNotReady })
		if !slices.Equal(got, want) {
			return fmt.Sprintf("taints = %v, want %v (every other taint kept)", got, want)
		}
		return ""
	})
}
