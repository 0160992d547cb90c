package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/mounttable"
)

func (u *upper) startEtcd(context.Context) error {
	d, err := u.startDaemon("etcd", []string{u.bin("k8s/etcd"),
		"--name=s3csi", "--data-dir=" + filepath.Join(DataDir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=s3csi=http://127.0.0.1:2380", "--listen-metrics-urls=", "--log-level=warn",
		// A throwaway store: no snapshot churn.
		"--snapshot-count=1000000", "--quota-backend-bytes=4294967296",
	})
	if err != nil {
		return err
	}
	c, _, _ := tlsClient()
	return d.waitReady(30*time.Second, func() error { _, err := get(c, "http://127.0.0.1:2379/health", ""); return err })
}

func (u *upper) startAPIServer(context.Context) error {
	pki := func(f string) string { return filepath.Join(pkiDir, f) }
	d, err := u.startDaemon("kube-apiserver", []string{u.bin("k8s/kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", fmt.Sprintf("--secure-port=%d", APIPort), "--advertise-address=" + NodeIP,
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"), "--token-auth-file=" + pki("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true", "--profiling=false", "--v=1",
	})
	if err != nil {
		return err
	}
	c, token, err := tlsClient()
	if err != nil {
		return err
	}
	return d.waitReady(90*time.Second, func() error {
		_, err := get(c, fmt.Sprintf("https://%s:%d/readyz", NodeIP, APIPort), token)
		return err
	})
}

func (u *upper) startControllers(context.Context) error {
	if _, err := u.startDaemon("kube-controller-manager", []string{u.bin("k8s/kube-controller-manager"),
		"--kubeconfig=" + kubeconfigPath, "--leader-elect=false", "--bind-address=127.0.0.1",
		"--service-account-private-key-file=" + filepath.Join(pkiDir, "sa.key"),
		"--root-ca-file=" + filepath.Join(pkiDir, "ca.crt"),
		"--use-service-account-credentials=false",
		// No cloud, no node IPAM (the CNI bridge hands out pod addresses).
		"--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
		"--profiling=false", "--v=1",
	}); err != nil {
		return err
	}
	_, err := u.startDaemon("kube-scheduler", []string{u.bin("k8s/kube-scheduler"),
		"--kubeconfig=" + kubeconfigPath, "--authentication-kubeconfig=" + kubeconfigPath,
		"--authorization-kubeconfig=" + kubeconfigPath, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--profiling=false", "--v=1",
	})
	return err
}

// containerdConfig is a node's containerd configuration: its own root, state and socket; the
// CRI plugin with runc (cgroupfs), the locally imported pause image, and the CNI bridge.
func containerdConfig(n *node) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This machine lacks CAP_SYS_RESOURCE: without it every sandbox fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, n.containerdRoot, n.containerdState, n.containerdSocket, n.containerdSocket+".ttrpc", pauseImage, cniBinDir, n.cniConfDir, n.optDir)
}

// cniConfig is a node's pod network: a bridge inside the node's network namespace with
// host-local addresses from its pod range (their state in the rig's own directory).
func cniConfig(n *node) string {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "s3csi-e2e",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.podCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": n.cniIPAMDir,
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b)
}

func (u *upper) startContainerd(ctx context.Context) error {
	return u.startContainerdOn(ctx, firstNode())
}

// startContainerdOn starts node n's containerd in the node's namespaces.
func (u *upper) startContainerdOn(_ context.Context, n *node) error {
	for _, d := range []string{n.containerdRoot, n.containerdState, n.cniConfDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	cfg := filepath.Join(n.dataDir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.cniConfDir, "10-s3csi.conflist"), []byte(cniConfig(n)), 0o644); err != nil {
		return err
	}
	d, err := u.startDaemonIn(n, "containerd", []string{"containerd", "--config", cfg})
	if err != nil {
		return err
	}
	return d.waitReady(30*time.Second, func() error { return run(ctrAt(n.containerdSocket, "version")...) })
}

// Ctr returns argv for ctr against the rig's containerd, in the k8s.io namespace.
func Ctr(args ...string) []string { return ctrAt(containerdSocket, args...) }

// ctrAt returns argv for ctr against the containerd listening on socket, in the k8s.io namespace.
func ctrAt(socket string, args ...string) []string {
	return append([]string{"ctr", "--address", socket, "--namespace", "k8s.io"}, args...)
}

func (u *upper) startKubelet(ctx context.Context) error {
	// kubelet's root must be a shared mount (mounts made under it must reach containers and the
	// systemd units' namespace); make it one before kubelet starts, in a way Down undoes. (A
	// second node's is made one when its mount namespace is set up.)
	if err := os.MkdirAll(KubeletDir, 0o750); err != nil {
		return err
	}
	if !isMountPoint(KubeletDir) {
		if err := run("mount", "--bind", KubeletDir, KubeletDir); err != nil {
			return err
		}
	}
	if err := run("mount", "--make-rshared", KubeletDir); err != nil {
		return err
	}
	return u.startKubeletOn(ctx, firstNode())
}

// startKubeletOn starts node n's kubelet in the node's namespaces and waits until its Node is
// Ready.
func (u *upper) startKubeletOn(ctx context.Context, n *node) error {
	cfg := filepath.Join(n.dataDir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(n)), 0o600); err != nil {
		return err
	}
	args := []string{u.bin("k8s/kubelet"),
		"--config=" + cfg, "--kubeconfig=" + n.kubeconfig, "--node-ip=" + n.ip,
		"--hostname-override=" + n.name, "--root-dir=" + KubeletDir,
		"--cert-dir=" + filepath.Join(n.dataDir, "kubelet-pki"), "--v=2",
	}
	if len(n.labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(n.labels, ","))
	}
	d, err := u.startDaemonIn(n, "kubelet", args)
	if err != nil {
		return err
	}
	return d.waitReady(120*time.Second, func() error {
		out, err := exec.CommandContext(ctx, u.bin("k8s/kubectl"), "--kubeconfig="+kubeconfigPath, "get", "node", n.name,
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if strings.TrimSpace(string(out)) != "True" {
			return fmt.Errorf("node %s Ready=%q", n.name, out)
		}
		return nil
	})
}

// kubeletConfig is node n's kubelet configuration; a second node's pods get cgroups of their
// own (cgroupRoot), so that the two kubelets never manage each other's.
func kubeletConfig(n *node) string {
	root := ""
	if n.cgroupRoot != "" {
		root = "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
failSwapOn: false
failCgroupV1: false
enforceNodeAllocatable: []
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
resolvConf: /etc/resolv.conf
maxPods: 250
# kubelet re-syncs each pod (and republishes requiresRepublish volumes) this often (default 1m):
# shorter, so credential rotation and repairs show within the suite's patience.
syncFrequency: 10s
podLogsDir: %s
%s`, n.containerdSocket, n.podLogsDir, root)
}

// isMountPoint reports whether path is the mount point of some mount.
func isMountPoint(path string) bool {
	entries, _ := mounttable.Table{}.List()
	return slices.ContainsFunc(entries, func(e mounttable.Entry) bool { return e.MountPoint == path })
}

// startSystemd starts a systemd user manager inside NetNS (its units, systemd mode's mount-s3,
// must reach the S3 server there), in a private mount namespace whose only difference is a
// tmpfs on /run/systemd (so it believes it runs under systemd without touching the host's
// /run/systemd); the kubelet directory is shared, so mounts its units make reach kubelet and
// the pods.
func (u *upper) startSystemd(ctx context.Context) error { return u.startSystemdOn(ctx, firstNode()) }

// startSystemdOn starts node n's user manager in the node's namespaces.
func (u *upper) startSystemdOn(_ context.Context, n *node) error {
	if err := os.MkdirAll(n.xdgDir, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat("/run/systemd"); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll("/run/systemd", 0o755); err != nil {
			return err
		}
		u.state.Created = append(u.state.Created, "/run/systemd")
		if err := u.state.save(); err != nil {
			return err
		}
	}
	// Its /etc is a copy of the machine's (EtcDir), kept across the rig's reboots: the user the
	// node plugin creates for mount-s3 (node.mountS3User) goes there, not into this machine's.
	if _, err := os.Stat(n.etcDir); errors.Is(err, os.ErrNotExist) {
		if out, err := exec.Command("cp", "-a", "/etc", n.etcDir).CombinedOutput(); err != nil {
			return fmt.Errorf("copy /etc for the user manager: %v: %s", err, out)
		}
	}
	// XDG_RUNTIME_DIR is the same path on every node (the chart's node.systemdSocket is one
	// value); a second node's mount namespace has its own directory there (n.xdgDir).
	d, err := u.startDaemonIn(n, "systemd", []string{"unshare", "-m", "--propagation", "unchanged", "sh", "-c",
		"mount --bind " + n.etcDir + " /etc && " +
			"{ ! mountpoint -q /run/systemd || mount --make-rslave /run/systemd; } && mount -t tmpfs tmpfs /run/systemd && " +
			"mkdir -p /run/systemd/system && exec /lib/systemd/systemd --user"},
		"XDG_RUNTIME_DIR="+systemdRuntimeDir)
	if err != nil {
		return err
	}
	return d.waitReady(30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(n.xdgDir, "systemd", "private")); err != nil {
			return err
		}
		out, err := userManagerAt(n.xdgDir, "systemctl", "show", "--property=SystemState", "--value")
		if err != nil {
			return err
		}
		if st := strings.TrimSpace(out); st != "running" && st != "degraded" {
			return fmt.Errorf("SystemState=%s", st)
		}
		return nil
	})
}

// Systemctl runs `systemctl --user ARGS` against the rig's user manager.
func Systemctl(args ...string) (string, error) { return userManager("systemctl", args...) }

// SystemdRun runs `systemd-run --user ARGS` against the rig's user manager (a transient unit, as
// another program than the driver would start one) and waits for its start job.
func SystemdRun(args ...string) (string, error) { return userManager("systemd-run", args...) }

// userManager runs a systemd client with --user against the rig's user manager.
func userManager(program string, args ...string) (string, error) {
	return userManagerAt(systemdRuntimeDir, program, args...)
}

// userManagerAt runs a systemd client with --user against the user manager whose runtime
// directory is xdg (as this process sees it).
func userManagerAt(xdg, program string, args ...string) (string, error) {
	cmd := exec.Command(program, append([]string{"--user"}, args...)...)
	cmd.Env = append(append([]string(nil), baseEnv...), "XDG_RUNTIME_DIR="+xdg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s --user %s: %v: %s", program, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (u *upper) startS3(context.Context) error {
	if err := os.MkdirAll(s3DataDir, 0o700); err != nil {
		return err
	}
	iamDir := filepath.Join(DataDir, "s3-iam")
	if err := os.MkdirAll(iamDir, 0o700); err != nil {
		return err
	}
	// With IAM, so tests can add accounts (credential rotation) through the admin port.
	d, err := u.startDaemon("versitygw", []string{u.bin("versitygw"), "--port", fmt.Sprintf("%s:%d", NodeIP, S3Port), "--health", "/health",
		"--iam-dir", iamDir, "--admin-port", fmt.Sprintf("%s:%d", NodeIP, S3AdminPort), "posix", s3DataDir},
		"ROOT_ACCESS_KEY="+S3AccessKey, "ROOT_SECRET_KEY="+S3SecretKey)
	if err != nil {
		return err
	}
	c, _, _ := tlsClient()
	return d.waitReady(30*time.Second, func() error { _, err := get(c, S3Endpoint()+"/health", ""); return err })
}
