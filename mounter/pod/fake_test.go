package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

// fakeMount is one mount of fakeKernel's table.
type fakeMount struct {
	id, minor      int
	point, fsType  string
	source, option string
}

// fakeKernel keeps a mount table in memory and writes it, in mountinfo's format, to a file that
// the Mounter's real mounthealth.Checker reads; FUSE connections it marks dead answer ENOTCONN
// to the checker's probe. Directories are real (below the test's temporary kubelet dir).
type fakeKernel struct {
	t    *testing.T
	file string

	mu      sync.Mutex
	mounts  []fakeMount // bottom first
	next    int         // next mount id and device minor
	dead    map[int]bool
	calls   []string
	failOn  map[string]error // "bind", "fuse": the call's error
	bindsOK int              // binds that succeed before failOn["bind"] applies
	answers func(path string) error
	fds     []*os.File
}

func newFakeKernel(t *testing.T) *fakeKernel {
	k := &fakeKernel{t: t, file: filepath.Join(t.TempDir(), "mountinfo"), next: 100, dead: map[int]bool{}, failOn: map[string]error{}}
	k.mounts = []fakeMount{{id: 1, minor: 1, point: "/", fsType: "ext4", source: "/dev/vda"}}
	k.write()
	t.Cleanup(func() {
		for _, f := range k.fds {
			f.Close()
		}
	})
	return k
}

// write renders the table as /proc/self/mountinfo does. Called with mu held (or before use).
func (k *fakeKernel) write() {
	var b strings.Builder
	for _, m := range k.mounts {
		opts := m.option
		if opts == "" {
			opts = "rw"
		}
		fmt.Fprintf(&b, "%d 1 0:%d / %s rw,nosuid,nodev - %s %s %s\n", m.id, m.minor, m.point, m.fsType, m.source, opts)
	}
	if err := os.WriteFile(k.file, []byte(b.String()), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

func (k *fakeKernel) add(m fakeMount) {
	m.id = k.next
	k.next++
	k.mounts = append(k.mounts, m)
	k.write()
}

func (k *fakeKernel) top(path string) (fakeMount, bool) {
	for i := len(k.mounts) - 1; i >= 0; i-- {
		if k.mounts[i].point == path {
			return k.mounts[i], true
		}
	}
	return fakeMount{}, false
}

func (k *fakeKernel) record(format string, args ...any) {
	k.calls = append(k.calls, fmt.Sprintf(format, args...))
}

func (k *fakeKernel) MountFUSE(source string, _, readOnly bool) (*os.File, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.record("fuse %s ro=%v", source, readOnly)
	if err := k.failOn["fuse"]; err != nil {
		return nil, err
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	k.fds = append(k.fds, f)
	k.add(fakeMount{minor: k.next, point: source, fsType: "fuse", source: mounttable.FSName})
	return f, nil
}

func (k *fakeKernel) Bind(source, target string, readOnly bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.record("bind %s %s ro=%v", source, target, readOnly)
	if err := k.failOn["bind"]; err != nil {
		if k.bindsOK == 0 {
			return err
		}
		k.bindsOK--
	}
	src, ok := k.top(source)
	if !ok {
		return fmt.Errorf("bind: nothing mounted at %s", source)
	}
	src.point = target
	k.add(src)
	return nil
}

// oldGuard mounts an earlier release's guard at target, as that release's publish did before
// its bind.
func (k *fakeKernel) oldGuard(target string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.add(fakeMount{minor: k.next, point: target, fsType: "tmpfs", source: mounttable.GuardSource, option: "ro"})
}

func (k *fakeKernel) Unmount(path string, how unmountHow) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.record("unmount %s %s", path, [...]string{"plain", "detach", "abort"}[how])
	for i := len(k.mounts) - 1; i >= 0; i-- {
		if k.mounts[i].point == path {
			k.mounts = append(k.mounts[:i], k.mounts[i+1:]...)
			k.write()
			return nil
		}
	}
	return nil
}

func (k *fakeKernel) Answer(path string) error {
	k.mu.Lock()
	answers := k.answers
	k.mu.Unlock()
	if answers != nil {
		return answers(path)
	}
	return nil
}

// statfs is the checker's probe: ENOTCONN for a dead connection.
func (k *fakeKernel) statfs(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.top(path); ok && k.dead[m.minor] {
		return syscall.ENOTCONN
	}
	return nil
}

// kill makes the FUSE connection mounted at path dead, with every bind of it.
func (k *fakeKernel) kill(path string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.top(path)
	if !ok {
		k.t.Fatalf("kill: nothing mounted at %s", path)
	}
	k.dead[m.minor] = true
}

// at lists the mounts at path, bottom first, as "fstype:source:minor".
func (k *fakeKernel) at(path string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, m := range k.mounts {
		if m.point == path {
			out = append(out, fmt.Sprintf("%s:%s:%d", m.fsType, m.source, m.minor))
		}
	}
	return out
}

// took returns and forgets the calls made so far.
func (k *fakeKernel) took() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.calls
	k.calls = nil
	return c
}

// fakeCluster serves Mountpoint Pods from a map; a workload's attachment is waitFor.
type fakeCluster struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	waitFor map[string]string // workload UID → Mountpoint Pod name
	waitErr error
	onPod   []func(string, *corev1.Pod)
}

func (c *fakeCluster) WaitForMountpointPod(_ context.Context, workloadUID, _, _ string) (*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waitErr != nil {
		return nil, c.waitErr
	}
	p := c.pods[c.waitFor[workloadUID]]
	if p == nil {
		return nil, fmt.Errorf("%w: no Mountpoint Pod for %s", context.DeadlineExceeded, workloadUID)
	}
	return p.DeepCopy(), nil
}

func (c *fakeCluster) MountpointPod(_ context.Context, name string) (*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[name]; p != nil {
		return p.DeepCopy(), nil
	}
	return nil, nil
}

func (c *fakeCluster) ReadMountpointPod(ctx context.Context, name string) (*corev1.Pod, error) {
	return c.MountpointPod(ctx, name)
}

func (c *fakeCluster) MountpointPods(context.Context) ([]corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []corev1.Pod
	for _, p := range c.pods {
		out = append(out, *p.DeepCopy())
	}
	return out, nil
}

func (c *fakeCluster) OnMountpointPod(f func(string, *corev1.Pod)) { c.onPod = append(c.onPod, f) }

// sent is one hand-over the fake sender received.
type sent struct {
	socket string
	opts   mountoptions.Options
}

// rig is a Mounter wired to fakes, on a temporary kubelet directory.
type rig struct {
	t       *testing.T
	kubelet string
	k       *fakeKernel
	c       *fakeCluster
	m       *Mounter

	mu      sync.Mutex
	sent    []sent
	sendErr error
	// onSend runs in the sender (the Mountpoint Pod's reaction).
	onSend func(comm string)
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, kubelet: t.TempDir(), k: newFakeKernel(t), c: &fakeCluster{pods: map[string]*corev1.Pod{}, waitFor: map[string]string{}}}
	health := &mounthealth.Checker{Table: mounttable.Table{Path: r.k.file}, Statfs: r.k.statfs}
	m, err := newMounter(Config{KubeletPath: r.kubelet, Health: health}, r.c, r.k, r.send)
	if err != nil {
		t.Fatal(err)
	}
	m.gid = os.Getgid() // credential files owned by a group the test may give them
	r.m = m
	return r
}

func (r *rig) send(_ context.Context, socket string, o mountoptions.Options, fd int) error {
	r.mu.Lock()
	r.sent = append(r.sent, sent{socket: socket, opts: o})
	err, onSend := r.sendErr, r.onSend
	r.mu.Unlock()
	if fd < 0 {
		return errors.New("no fd")
	}
	if onSend != nil {
		onSend(filepath.Dir(socket))
	}
	return err
}

func (r *rig) sends() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.sent...)
}

// mountpointPod adds a Running Mountpoint Pod with its comm directory and assigns workloads to it.
func (r *rig) mountpointPod(name string, workloads ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "mount-s3", UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := os.MkdirAll(r.m.paths.comm(p.UID), 0o755); err != nil {
		r.t.Fatal(err)
	}
	r.c.mu.Lock()
	r.c.pods[name] = p
	for _, w := range workloads {
		r.c.waitFor[w] = name
	}
	r.c.mu.Unlock()
	return p
}

// target returns a workload's kubelet target path, with its parent directory created.
func (r *rig) target(workload string) string {
	t := filepath.Join(r.kubelet, "pods", workload, "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if err := os.MkdirAll(filepath.Dir(t), 0o755); err != nil {
		r.t.Fatal(err)
	}
	return t
}
