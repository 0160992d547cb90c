// Package rig brings up a real single-node Kubernetes cluster on this machine for the cluster
// suite (tests/cluster) and tears it down again: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd with runc and the CNI bridge, kubelet, a systemd user manager
// (systemd mode's mount-s3 units) and versitygw (the S3 server).
//
// Network: everything runs inside one network namespace the rig creates (NetNS), entered with
// `nsenter --net` so that mounts stay in the host's mount namespace (kubelet, containerd, the
// node plugin and systemd units must see each other's mounts). The namespace holds its own
// loopback and a veth pair carrying the node address (NodeIP) and the default route; pods get
// addresses on a CNI bridge inside it; the `kubernetes` Service address is DNATed to the API
// server by two iptables rules inside it. No traffic leaves the namespace and nothing on the
// host's network changes. Clients (kubectl, helm, the Go tests, e2e.test) run inside it too
// (Exec).
//
// Everything the rig creates outside its own directories is listed in the State and removed by
// Down, which also works from a fresh process after a crash (the state file is on disk): the
// machine is left as it was found.
package rig

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Fixed names and addresses. They live inside the rig's own network namespace, so they cannot
// clash with the host's; one rig runs at a time on a machine (Up refuses a second one).
const (
	// NetNS is the network namespace holding the whole cluster.
	NetNS = "s3csi-e2e"
	// NodeName is the one node's name.
	NodeName = "s3csi-node"
	// NodeIP is the node address (on the veth inside NetNS).
	NodeIP = "10.213.0.2"
	// ServiceCIDR is the Service range; KubernetesServiceIP is the `kubernetes` Service.
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
	// PodCIDR is the CNI bridge's range.
	PodCIDR = "10.88.0.0/16"
	// APIPort is kube-apiserver's secure port on NodeIP.
	APIPort = 6443
	// S3Port is versitygw's port on NodeIP; S3AdminPort its admin API (IAM accounts).
	S3Port      = 7070
	S3AdminPort = 7071
	// KubeletDir is kubelet's root directory (the default: what the chart and e2e expect).
	KubeletDir = "/var/lib/kubelet"
	// MountS3InstallDir is where the chart's install-mp puts mount-s3 (the chart default).
	MountS3InstallDir = "/opt/mountpoint-s3-csi"
	// DataDir holds the rig's persistent files: certificates, etcd, containerd's root,
	// versitygw's buckets, logs and the state file.
	DataDir = "/var/lib/s3csi-cluster"
	// RunDir holds its runtime files: sockets, containerd's state, the systemd user manager's
	// XDG_RUNTIME_DIR.
	RunDir = "/run/s3csi-cluster"
	// S3AccessKey and S3SecretKey are versitygw's root credentials.
	S3AccessKey = "rigaccess"
	S3SecretKey = "rigsecret-0123456789"
)

// Paths derived from the directories above.
var (
	stateFile = filepath.Join(DataDir, "state.json")
	// EtcDir is the /etc of the rig's systemd user manager and its units: a copy of the
	// machine's, made at the first start.
	EtcDir             = filepath.Join(DataDir, "etc")
	pkiDir             = filepath.Join(DataDir, "pki")
	logDir             = filepath.Join(DataDir, "logs")
	podLogsDir         = filepath.Join(DataDir, "pod-logs")
	containerdRoot     = filepath.Join(DataDir, "containerd")
	containerdState    = filepath.Join(RunDir, "containerd")
	containerdSocket   = filepath.Join(RunDir, "containerd", "containerd.sock")
	systemdRuntimeDir  = filepath.Join(RunDir, "xdg")
	netnsPath          = filepath.Join("/run/netns", NetNS)
	kubeconfigPath     = filepath.Join(DataDir, "admin.kubeconfig")
	kubeletKubeconfig  = filepath.Join(DataDir, "kubelet.kubeconfig")
	cniConfDir         = filepath.Join(DataDir, "cni")
	cniBinDir          = "/usr/lib/cni"
	s3DataDir          = filepath.Join(DataDir, "s3")
	pauseImage         = "registry.k8s.io/pause:3.10"
	kubernetesDNATRule = []string{"-d", KubernetesServiceIP + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
		"--to-destination", fmt.Sprintf("%s:%d", NodeIP, APIPort), "-m", "comment", "--comment", "s3csi-e2e kubernetes service"}
)

// SystemdSocket is the user manager's private D-Bus socket (the chart's node.systemdSocket).
func SystemdSocket() string { return filepath.Join(systemdRuntimeDir, "systemd", "private") }

// S3Endpoint is versitygw's URL, reachable from the node, its pods and its systemd units.
func S3Endpoint() string { return fmt.Sprintf("http://%s:%d", NodeIP, S3Port) }

// S3DataDir is versitygw's posix back end: a bucket is a directory of it, an object a file
// (a test may make a large object there as a sparse file).
func S3DataDir() string { return s3DataDir }

// S3AdminEndpoint is versitygw's admin API URL.
func S3AdminEndpoint() string { return fmt.Sprintf("http://%s:%d", NodeIP, S3AdminPort) }

// Kubeconfig is the admin kubeconfig (cluster-admin through a static token).
func Kubeconfig() string { return kubeconfigPath }

// State records what a running rig started and created, so Down can undo exactly that.
type State struct {
	// Started is when Up began.
	Started time.Time
	// Processes are the rig's daemons, in start order.
	Processes []Process
	// Created lists host paths that did not exist before Up (removed by Down).
	Created []string
	// NetNSBefore lists the entries of /run/netns before Up (pod namespaces containerd adds
	// are the others).
	NetNSBefore []string
	// Bin is the repository's bin/ directory the rig took its binaries from.
	Bin string
	// Images are the image references imported into containerd.
	Images []string
}

// Process is one daemon of the rig.
type Process struct {
	Name string
	PID  int
	// Exe is the program's path, checked before signalling PID (it may have been reused).
	Exe string
	Log string
}

// LoadState reads the state of the running rig.
func LoadState() (*State, error) {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no cluster rig is running (%s does not exist): start one with rigctl up", stateFile)
		}
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w", stateFile, err)
	}
	return &s, nil
}

// save writes the state atomically; Up saves after every step so Down always knows enough.
func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(DataDir, 0o700); err != nil {
		return err
	}
	tmp := stateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, stateFile)
}

// ClientEnv is the environment a client of the cluster (kubectl, helm, the Go tests, e2e.test)
// adds to its own: the admin kubeconfig, and kubectl's and helm's caches inside the rig's data
// directory rather than the user's home.
func ClientEnv(bin string) []string {
	return []string{
		"KUBECONFIG=" + kubeconfigPath,
		"KUBECACHEDIR=" + filepath.Join(DataDir, "client", "kube-cache"),
		"HELM_CACHE_HOME=" + filepath.Join(DataDir, "client", "helm-cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(DataDir, "client", "helm-config"),
		"HELM_DATA_HOME=" + filepath.Join(DataDir, "client", "helm-data"),
		"PATH=" + filepath.Join(bin, "k8s") + ":" + bin + ":" + os.Getenv("PATH"),
	}
}

// LogDir is where the rig's daemons write their logs.
func LogDir() string { return logDir }
