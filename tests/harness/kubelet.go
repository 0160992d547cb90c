package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// MountpointKubelet plays the scheduler and the kubelet of one node for Mountpoint Pods: it binds
// the pods pinned to its node, creates their comm emptyDir below the kubelet directory, runs
// bin/scality-csi-mounter as uid/gid 1000 in a private mount namespace where the comm dir is
// /comm (like the container), reports phases (Running; Succeeded on exit 0; restarts on failure,
// like restartPolicy OnFailure) and stops the process when the pod is deleted.
type MountpointKubelet struct {
	Node      string
	Kubelet   string
	Namespace string

	t      TB
	k      *Kube
	mu     sync.Mutex
	procs  map[string]*Process // by pod name
	starts map[string]int      // process starts by pod name
	paused bool
	// refuse, when set, is the scheduler's message for Mountpoint Pods it cannot place.
	refuse string
	// container replaces scality-csi-mounter for pods started from now on ("" = the real one).
	container string
	cache     cache.Cache
	work      chan types.NamespacedName
}

// SetPaused stops (true) or resumes (false) scheduling and starting new Mountpoint Pods, as if
// the node had no room for them. Resuming looks at every pod again.
func (mk *MountpointKubelet) SetPaused(paused bool) {
	mk.mu.Lock()
	mk.paused = paused
	mk.mu.Unlock()
	if paused {
		return
	}
	var pods corev1.PodList
	if err := mk.cache.List(context.Background(), &pods, client.InNamespace(mk.Namespace)); err != nil {
		mk.t.Logf("kubelet: list pods: %v", err)
		return
	}
	for i := range pods.Items {
		mk.work <- client.ObjectKeyFromObject(&pods.Items[i])
	}
}

// RefuseScheduling makes the scheduler side refuse new Mountpoint Pods of the node with
// message (condition PodScheduled False, reason Unschedulable, as kube-scheduler sets it);
// "" places them again, looking at every pod again.
func (mk *MountpointKubelet) RefuseScheduling(message string) {
	mk.mu.Lock()
	mk.refuse = message
	mk.mu.Unlock()
	mk.SetPaused(false)
}

// SetContainer makes Mountpoint Pods started from now on run the executable at path instead of
// scality-csi-mounter (same user, namespace and arguments), e.g. a compromised container; ""
// restores the real one.
func (mk *MountpointKubelet) SetContainer(path string) {
	mk.mu.Lock()
	mk.container = path
	mk.mu.Unlock()
}

// mounterUID is the user the Mountpoint Pod runs as (its securityContext).
const mounterUID = 1000

// StartMountpointKubelet starts the fake kubelet for node until t ends.
func StartMountpointKubelet(t TB, k *Kube, node, kubeletDir, namespace string) *MountpointKubelet {
	t.Helper()
	if err := os.MkdirAll("/comm", 0o755); err != nil {
		t.Fatalf("create /comm (mount point of the fake container's comm dir): %v", err)
	}
	mk := &MountpointKubelet{Node: node, Kubelet: kubeletDir, Namespace: namespace, t: t, k: k, procs: map[string]*Process{}, starts: map[string]int{}}
	c, err := cache.New(k.Config, cache.Options{Scheme: k.Scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Namespaces: map[string]cache.Config{namespace: {}}},
	}})
	if err != nil {
		t.Fatalf("kubelet cache: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatalf("kubelet informer: %v", err)
	}
	work := make(chan types.NamespacedName, 1024)
	mk.cache, mk.work = c, work
	enqueue := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if p, ok := o.(*corev1.Pod); ok {
			work <- client.ObjectKeyFromObject(p)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}); err != nil {
		t.Fatalf("kubelet handler: %v", err)
	}
	go func() { _ = c.Start(ctx) }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case nn := <-work:
				mk.sync(ctx, c, nn)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		mk.mu.Lock()
		procs := mk.procs
		mk.procs = map[string]*Process{} // supervisors see their process is no longer wanted
		mk.mu.Unlock()
		for _, p := range procs {
			p.Kill()
		}
	})
	return mk
}

// Starts returns how many times the mounter of a pod was started (restarts + 1).
func (mk *MountpointKubelet) Starts(pod string) int {
	mk.mu.Lock()
	defer mk.mu.Unlock()
	return mk.starts[pod]
}

// Mounter returns the mounter process of a pod (nil when none ran).
func (mk *MountpointKubelet) Mounter(pod string) *Process {
	mk.mu.Lock()
	defer mk.mu.Unlock()
	return mk.procs[pod]
}

func pinnedNode(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

func (mk *MountpointKubelet) sync(ctx context.Context, c cache.Cache, nn types.NamespacedName) {
	var pod corev1.Pod
	err := c.Get(ctx, nn, &pod)
	if apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil) {
		mk.stop(nn.Name)
		return
	}
	if err != nil {
		return
	}
	mk.mu.Lock()
	paused, refuse := mk.paused, mk.refuse
	mk.mu.Unlock()
	if paused {
		return
	}
	switch {
	case pod.Spec.NodeName == "" && pinnedNode(&pod) == mk.Node && refuse != "":
		if _, refused := podcontract.Unschedulable(&pod); refused {
			return
		}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: refuse, LastTransitionTime: metav1.Now()})
		if err := mk.k.Client.Status().Update(ctx, &pod); err != nil && !apierrors.IsConflict(err) {
			mk.t.Logf("kubelet %s: refuse %s: %v", mk.Node, pod.Name, err)
		}
	case pod.Spec.NodeName == "" && pinnedNode(&pod) == mk.Node: // schedule it
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: mk.Node}}
		if err := mk.k.Client.SubResource("binding").Create(ctx, &pod, b); err != nil && !apierrors.IsConflict(err) {
			mk.t.Logf("kubelet %s: bind %s: %v", mk.Node, pod.Name, err)
		}
	case pod.Spec.NodeName == mk.Node && pod.Status.Phase == "" || pod.Spec.NodeName == mk.Node && pod.Status.Phase == corev1.PodPending:
		mk.run(ctx, &pod)
	}
}

// commDir is the pod's comm emptyDir on the host, group-owned by the pod's fsGroup like kubelet
// makes it.
func (mk *MountpointKubelet) commDir(p *corev1.Pod) string {
	return filepath.Join(mk.Kubelet, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "comm")
}

func (mk *MountpointKubelet) run(ctx context.Context, p *corev1.Pod) {
	mk.mu.Lock()
	if _, running := mk.procs[p.Name]; running {
		mk.mu.Unlock()
		return
	}
	comm := mk.commDir(p)
	for dir := filepath.Dir(comm); dir != mk.Kubelet; dir = filepath.Dir(dir) {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.Chmod(dir, 0o755)
	}
	if err := os.MkdirAll(comm, 0o770); err != nil {
		mk.mu.Unlock()
		mk.t.Logf("kubelet: comm dir: %v", err)
		return
	}
	_ = os.Chown(comm, 0, mounterUID)
	_ = os.Chmod(comm, 0o2770)
	// The pod's /tmp (its cache volume), as TMPDIR: a real container's /tmp is its own.
	tmp := filepath.Join(filepath.Dir(comm), "tmp")
	_ = os.MkdirAll(tmp, 0o770)
	_ = os.Chown(tmp, 0, mounterUID)
	_ = os.Chmod(tmp, 0o2770)
	// A private mount namespace: the comm dir at /comm, and no inherited FUSE mount (a copy would
	// keep another mount's FUSE connection alive after the host unmounts it, as no real
	// container does).
	script := `mount --bind "$0" /comm || exit 1
for m in $(findmnt -rn -t fuse -o TARGET | sort -r); do umount -l "$m" 2>/dev/null; done
exec setpriv --reuid=1000 --regid=1000 --clear-groups "$1" --comm-dir=/comm --mount-s3-path="$2" --v=4`
	container := mk.container
	if container == "" {
		container = Bin(mk.t, "scality-csi-mounter")
	}
	proc := &Process{Name: "scality-csi-mounter", Path: "/usr/bin/unshare",
		Args:    []string{"-m", "--propagation", "private", "sh", "-c", script, comm, container, MountS3(mk.t)},
		Env:     []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + tmp},
		LogFile: filepath.Join(mk.t.TempDir(), p.Name+".log"), t: mk.t}
	proc.Start()
	mk.procs[p.Name] = proc
	mk.starts[p.Name]++
	mk.mu.Unlock()
	mk.setPhase(ctx, p, corev1.PodRunning)
	go mk.supervise(p, proc)
}

// supervise applies restartPolicy OnFailure: exit 0 → Succeeded, otherwise start again.
func (mk *MountpointKubelet) supervise(p *corev1.Pod, proc *Process) {
	<-proc.Exited()
	ctx := context.Background()
	mk.mu.Lock()
	if mk.procs[p.Name] != proc {
		mk.mu.Unlock()
		return // stopped on purpose
	}
	if proc.ExitCode() == 0 {
		mk.mu.Unlock()
		mk.setPhase(ctx, p, corev1.PodSucceeded)
		return
	}
	mk.starts[p.Name]++
	mk.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // kubelet's back-off, shortened
	mk.mu.Lock()
	if mk.procs[p.Name] == proc {
		proc.Start()
		go mk.supervise(p, proc)
	}
	mk.mu.Unlock()
}

func (mk *MountpointKubelet) stop(name string) {
	mk.mu.Lock()
	proc := mk.procs[name]
	delete(mk.procs, name)
	mk.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

func (mk *MountpointKubelet) setPhase(ctx context.Context, p *corev1.Pod, phase corev1.PodPhase) {
	for attempt := 0; attempt < 5; attempt++ {
		var cur corev1.Pod
		if err := mk.k.Client.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return
		}
		cur.Status.Phase = phase
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		if err := mk.k.Client.Status().Update(ctx, &cur); err == nil || !apierrors.IsConflict(err) {
			if err != nil {
				mk.t.Logf("kubelet: set %s %s: %v", p.Name, phase, err)
			}
			return
		}
	}
}

// String names the fake kubelet in messages.
func (mk *MountpointKubelet) String() string { return fmt.Sprintf("kubelet(%s)", mk.Node) }
