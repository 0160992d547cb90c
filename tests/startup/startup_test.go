// Package startup starts every binary of the project in every mode it has, on real parts, and
// checks what each prints while it starts and runs: no stack trace, no panic, and no
// "log.SetLogger(...) was never called" from controller-runtime (which prints it, with a stack
// trace, once 30 s have passed when nothing set its logger). The binaries that use
// controller-runtime must also route its logs to klog: their log shows its lines.
package startup

import (
	"fmt"
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
		// Without systemd mode the programs of its units are not checked: none there.
		started{"node plugin, pod mode only", node("n-pod", "--default-mounter=pod", "--systemd-mounter=false",
			"--mount-s3-path=/nonexistent/mount-s3", "--fuse-helper-path=/nonexistent/scality-fuse-helper"), cacheLogs},
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

// TestStartupChecksBinaries: in systemd mode the node plugin runs, through systemd, the host
// programs its mount units will run (mount-s3, scality-fuse-helper) and stops at once, with
// exit status 1 and a message naming the program, its path and its flag, when one is missing,
// not executable, or does not run (before, it started and every publish failed with "mount-s3
// printed nothing"). The programs that are there run (TestStartupLogs: the plugins keep running).
func TestStartupChecksBinaries(t *testing.T) {
	harness.RequireRoot(t)
	s3 := harness.StartS3(t)
	kubelet := harness.NewKubeletDir(t)
	harness.CleanupMounts(t, kubelet)
	sd := harness.StartSystemd(t, kubelet)
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notExecutable := write("mount-s3", "#!/bin/sh\n", 0o644)
	broken := write("broken-mount-s3", "#!/bin/sh\necho 'mount-s3: error while loading shared libraries: libfuse.so.2: cannot open shared object file' >&2\nexit 127\n", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapped := write("elsewhere/mount-s3", "#!/bin/sh\nexec "+harness.MountS3(t)+" \"$@\"\n", 0o755)
	helper := harness.Bin(t, "scality-fuse-helper")
	missingHelper := filepath.Join(dir, "bin", "scality-fuse-helper")

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "scality-fuse-helper missing",
			args: []string{"--mount-s3-path=" + harness.MountS3(t), "--fuse-helper-path=" + missingHelper},
			want: []string{
				fmt.Sprintf("systemd mode cannot mount: scality-fuse-helper (%s) is missing or not executable on the host (systemd could not execute it: status 203/EXEC); --fuse-helper-path names it", missingHelper),
			},
		},
		{
			// A mount-s3 installed elsewhere (--mount-s3-path) without the helper beside it.
			name: "scality-fuse-helper missing next to mount-s3 (auto)",
			args: []string{"--mount-s3-path=" + wrapped, "--fuse-helper-path=auto"},
			want: []string{
				fmt.Sprintf("systemd mode cannot mount: scality-fuse-helper (%s) is missing or not executable on the host", filepath.Join(filepath.Dir(wrapped), "scality-fuse-helper")),
				"--fuse-helper-path names it", "auto: next to --mount-s3-path",
			},
		},
		{
			name: "mount-s3 not executable",
			args: []string{"--mount-s3-path=" + notExecutable, "--fuse-helper-path=" + helper},
			want: []string{fmt.Sprintf("systemd mode cannot mount: mount-s3 (%s) is missing or not executable on the host (systemd could not execute it: status 203/EXEC); --mount-s3-path names it", notExecutable)},
		},
		{
			name: "mount-s3 does not run",
			args: []string{"--mount-s3-path=" + broken, "--fuse-helper-path=" + helper},
			want: []string{
				fmt.Sprintf("systemd mode cannot mount: mount-s3 (%s) does not run on the host: %s --version ended exit-code (status 127): mount-s3: error while loading shared libraries: libfuse.so.2", broken, broken),
				"--mount-s3-path names it",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{
				"--endpoint=unix://" + filepath.Join(t.TempDir(), "csi.sock"),
				"--node-id=n-check", "--kubelet-path=" + kubelet, "--systemd-socket=" + sd.Socket,
				"--s3-endpoint-url=" + s3.Endpoint, "--s3-region=" + s3.Region,
				"--default-mounter=systemd", "--pod-mounter=false", "--v=2",
			}, tc.args...)
			p := harness.StartProcess(t, "scality-s3-csi-driver", args, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
			select {
			case <-p.Exited():
			case <-time.After(60 * time.Second):
				t.Fatalf("the node plugin still runs:\n%s", tail(p.Log(), 20))
			}
			if code := p.ExitCode(); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			log := p.Log()
			for _, w := range tc.want {
				// klog quotes the error: its own quotes come escaped.
				if !strings.Contains(strings.ReplaceAll(log, `\"`, `"`), w) {
					t.Errorf("the log lacks %q:\n%s", w, tail(log, 20))
				}
			}
			check(t, tc.name, log, nil)
		})
	}
}
