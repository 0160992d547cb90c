package rig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Options configure Up.
type Options struct {
	// Bin is the repository's bin/ directory: bin/k8s/* (Kubernetes), bin/versitygw,
	// bin/csi-provisioner, bin/pause and the project's binaries for the images.
	Bin string
	// Log receives one line per step.
	Log io.Writer
	// Timings, when set, is a file Up appends a line per step to (name, seconds, ok): the
	// timing table of make test.
	Timings string
}

// upper carries Up's work.
type upper struct {
	opts    Options
	state   *State
	daemons map[string]*daemon
	start   time.Time
}

func (u *upper) logf(format string, args ...any) {
	if u.opts.Log != nil {
		fmt.Fprintf(u.opts.Log, "[rig %6.1fs] %s\n", time.Since(u.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// hostPrograms are the host commands the rig runs (Debian packages, see tools.mk).
var hostPrograms = []string{"ip", "iptables", "nsenter", "mount", "umount", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "busybox", "/lib/systemd/systemd", "systemctl"}

// binaries are the files below Options.Bin the rig needs.
var binaries = []string{"k8s/kube-apiserver", "k8s/kube-controller-manager", "k8s/kube-scheduler", "k8s/kubelet", "k8s/kubectl", "k8s/etcd",
	"versitygw", "pause", "csi-provisioner", "k8s/agnhost"}

// PrepareHost is the part of Up that runs in the host's network namespace: it checks the
// machine, records what exists before the rig (for Down), and creates NetNS. The rest
// (StartInside) must run inside NetNS.
func PrepareHost(opts Options) error {
	u := &upper{opts: opts, start: time.Now()}
	if os.Geteuid() != 0 {
		return errors.New("the cluster rig needs root (mounts, network namespaces, containers)")
	}
	if _, err := os.Stat(stateFile); err == nil {
		return fmt.Errorf("a cluster rig is already running (%s exists): run rigctl down first", stateFile)
	}
	var missing []string
	for _, p := range hostPrograms {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(opts.Bin, b)); err != nil {
			missing = append(missing, filepath.Join(opts.Bin, b))
		}
	}
	for _, p := range []string{"/dev/fuse", filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the cluster rig cannot run on this machine, missing: %s (make test-cluster installs them)", strings.Join(missing, ", "))
	}
	if entries, err := os.ReadDir(KubeletDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: this machine looks like a real Kubernetes node; the rig would disturb it", KubeletDir)
	}
	u.state = &State{Started: u.start, Bin: opts.Bin}
	// Every host path the rig or the components it runs may create (found by comparing the
	// file system before and after a run).
	for _, p := range []string{KubeletDir, MountS3InstallDir, DataDir, RunDir, "/var/lib/cni", "/run/containerd", "/run/netns", "/etc/cni",
		"/opt/cni", "/var/lib/containerd", "/etc/kubernetes", "/var/log/pods", "/var/log/containers", "/run/kubelet"} {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			u.state.Created = append(u.state.Created, p)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			u.state.NetNSBefore = append(u.state.NetNSBefore, e.Name())
		}
	}
	for _, d := range []string{DataDir, logDir, RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := u.state.save(); err != nil {
		return err
	}
	u.logf("creating network namespace %s (node %s)", NetNS, NodeIP)
	return createNetNS()
}

// StartInside starts the cluster; it must run inside NetNS (rigctl re-executes itself there
// with nsenter). It returns once the node is Ready, leaving every daemon running.
func StartInside(ctx context.Context, opts Options) error {
	st, err := LoadState()
	if err != nil {
		return err
	}
	u := &upper{opts: opts, state: st, daemons: map[string]*daemon{}, start: st.Started}
	if ino := netnsInode(); ino == 0 || !inNetNS(os.Getpid(), ino) {
		return fmt.Errorf("StartInside must run inside network namespace %s (nsenter --net=%s)", NetNS, netnsPath)
	}
	images := make(chan error, 1)
	go func() { images <- u.buildImages() }()
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"certificates", func(context.Context) error { _, err := writePKI(); return err }},
		{"etcd", u.startEtcd},
		{"kube-apiserver", u.startAPIServer},
		{"kube-controller-manager and kube-scheduler", u.startControllers},
		{"containerd", u.startContainerd},
		{"images", func(ctx context.Context) error {
			if err := <-images; err != nil {
				return err
			}
			return u.importImages(ctx)
		}},
		{"kubelet", u.startKubelet},
		{"systemd user manager", u.startSystemd},
		{"versitygw", u.startS3},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		u.logf("%s ready (%.1fs)", s.name, time.Since(t).Seconds())
		RecordTiming(opts.Timings, "rig/"+strings.ReplaceAll(s.name, " ", "-"), time.Since(t))
	}
	return nil
}

// tlsClient is an HTTPS client trusting the rig's CA, authenticated as the admin.
func tlsClient() (*http.Client, string, error) {
	pem, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	csv, err := os.ReadFile(filepath.Join(pkiDir, "tokens.csv"))
	if err != nil {
		return nil, "", err
	}
	token := strings.SplitN(string(csv), ",", 2)[0]
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, token, nil
}

// get fetches url (with an optional bearer token) and fails unless it answers 200.
func get(c *http.Client, url, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

func (u *upper) bin(name string) string { return filepath.Join(u.opts.Bin, name) }

// RecordTiming appends "name<TAB>seconds<TAB>ok" to file (nothing when file is empty).
func RecordTiming(file, name string, d time.Duration) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%.1f\tok\n", name, d.Seconds())
}
