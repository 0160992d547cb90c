// Package startup starts every binary of the project in every mode it has, on real parts, and
// checks what each prints while it starts and runs: no stack trace, no panic, and no
// "log.SetLogger(...) was never called" from controller-runtime (which prints it, with a stack
// trace, once 30 s have passed when nothing set its logger). The binaries that use
// controller-runtime must also route its logs to klog: their log shows its lines.
package startup

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// runFor is how long every binary runs: longer than controller-runtime's 30 s grace.
const runFor = 35 * time.Second

// bad matches what a clean start-up never prints.
var bad = regexp.MustCompile(`was never called|goroutine \d+ \[|panic:|\n\s+>\s+goroutine|fatal error:`)

// started is one binary in one mode: its process, and a line its log must have (controller-
// runtime's own logs reaching klog), if any.
type started struct {
	name string
	proc *harness.Process
	want *regexp.Regexp
}

func TestStartupLogs(t *testing.T) {
	harness.RequireRoot(t)
	kube := harness.StartAPIServer(t, harness.KubeOptions{})
	kube.EnsureNamespace(t, "mount-s3")
	s3 := harness.StartS3(t)
	kubelet := harness.NewKubeletDir(t)
	harness.CleanupMounts(t, kubelet)
	sd := harness.StartSystemd(t, kubelet)

	node := func(name string, args ...string) *harness.Process {
		kubeconfig := kube.Kubeconfig(t, "system:node:"+name)
		kube.BindRBAC(t, "node-rbac.yaml", "system:node:"+name)
		d := harness.StartDriver(t, harness.DriverOptions{
			KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, NodeID: name,
			ExtraArgs: append([]string{"--kubeconfig=" + kubeconfig, "--mountpoint-namespace=mount-s3"}, args...),
		})
		return d.Process
	}
	// controller-runtime's cache runs the informers with its own logger: with it routed to
	// klog, the node plugin's log (at -v=5) shows their start.
	cacheLogs := regexp.MustCompile(`logger="controller-runtime\.cache"`)
	var all []started
	all = append(all,
		started{"node plugin, systemd mode only", node("n-systemd", "--default-mounter=systemd", "--pod-mounter=false"), nil},
		started{"node plugin, pod mode only", node("n-pod", "--default-mounter=pod", "--systemd-mounter=false"), cacheLogs},
		started{"node plugin, both modes", node("n-both", "--default-mounter=systemd"), cacheLogs},
	)
	cp := harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: s3, WithCredentials: true})
	all = append(all, started{"CSI controller plugin (--mode=controller)", cp.Process, nil})
	ctrl := harness.StartController(t, kube, harness.ControllerOptions{LeaderElect: true})
	all = append(all, started{"scality-csi-controller", ctrl.Process, regexp.MustCompile(`"Starting workers"`)})
	comm := t.TempDir()
	mounter := harness.StartProcess(t, "scality-csi-mounter", []string{"--comm-dir=" + comm, "--mount-s3-path=" + harness.MountS3(t), "--v=5"}, nil)
	all = append(all, started{"scality-csi-mounter (waiting for a mount)", mounter, nil})

	// install-mp runs to its end.
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(filepath.Join(src, "mount-s3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	install := harness.StartProcess(t, "install-mp", []string{"--source-dir=" + src, "--install-dir=" + dst}, nil)
	select {
	case <-install.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("install-mp did not finish")
	}
	if code := install.ExitCode(); code != 0 {
		t.Errorf("install-mp exited %d:\n%s", code, install.Log())
	}
	check(t, "install-mp", install.Log(), nil)

	time.Sleep(runFor)
	var wg sync.WaitGroup
	for _, s := range all {
		if !s.proc.Running() {
			t.Errorf("%s exited early:\n%s", s.name, s.proc.Log())
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.proc.Stop() }()
	}
	wg.Wait()
	for _, s := range all {
		check(t, s.name, s.proc.Log(), s.want)
	}
}

// check fails t when log has anything bad, or lacks want.
func check(t *testing.T, name, log string, want *regexp.Regexp) {
	t.Helper()
	if m := bad.FindStringIndex(log); m != nil {
		from := max(0, m[0]-300)
		t.Errorf("%s printed %q:\n…%s…", name, log[m[0]:m[1]], log[from:min(len(log), m[1]+500)])
	}
	if want != nil && !want.MatchString(log) {
		t.Errorf("%s: no line matching %s: controller-runtime's logs do not reach klog (log.SetLogger)\n%s", name, want, tail(log, 30))
	}
	if strings.TrimSpace(log) == "" {
		t.Errorf("%s printed nothing", name)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
