// Package pluginoptions owns the flags of the scality-s3-csi-driver binary (node plugin and CSI
// controller): their definitions (AddFlags), their validation (Validate) and the start-up check
// of the CA bundle file (ReadCABundle). main parses and runs; tests/helm calls Parse and
// ReadCABundle on the arguments the Helm chart renders, so that a value the chart accepts is
// one the binary accepts.
package pluginoptions

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/klogflags"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/s3csi/s3-csi-driver/mounter/pod"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountmonitor"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
	"github.com/s3csi/s3-csi-driver/pkg/sysuser"
)

// resourceFlagHelp names what each resource flag sets.
var resourceFlagHelp = map[string]string{
	mountresources.AttrCPURequest:    "CPU request (CPUWeight)",
	mountresources.AttrCPULimit:      "CPU limit (CPUQuota)",
	mountresources.AttrMemoryRequest: "memory request (MemoryLow)",
	mountresources.AttrMemoryLimit:   "memory limit (MemoryMax: past it the kernel's OOM killer ends mount-s3 and the node plugin mounts the volume again)",
}

// maxFallbackAfter bounds --systemd-fallback-after: kubelet gives a publish 2 minutes, and the
// systemd mount that follows the wait needs the rest.
const maxFallbackAfter = 90 * time.Second

// Options are the parsed flags of scality-s3-csi-driver; Validate fills the parsed forms
// (MountResources, SliceCap, MaxCacheMiB).
type Options struct {
	Endpoint       string
	NodeID         string
	Mode           string
	SystemdSocket  string
	CredentialsDir string
	MountS3User    string
	CacheDir       string
	ProtectSystem  bool
	// mount-s3's default resources (systemd mode) and the node-wide cap of its slice, as
	// given, then as parsed by validate.
	ResourceFlags  map[string]*string
	SliceMemoryMax string
	CacheSizeLimit string
	MaxCacheMiB    uint64
	SliceCPULimit  string
	MountResources corev1.ResourceRequirements
	SliceCap       systemd.SliceCap
	// proxy of every S3 request: mount-s3's in both modes and the controller's.
	Proxy               proxyenv.Config
	MountS3Path         string
	FuseHelperPath      string
	UmountPath          string
	KubeletPath         string
	S3EndpointURL       string
	S3Region            string
	MaxVolumesPerNode   int64
	MountTimeout        time.Duration
	SystemdTimeout      time.Duration
	S3CABundle          string
	DefaultMounter      string
	Kubeconfig          string
	MountpointNamespace string
	PodSweepInterval    time.Duration
	ApiTimeout          time.Duration
	AttachmentWait      time.Duration
	FallbackAfter       time.Duration
	PodMounter          bool
	SystemdMounter      bool
	HealthAddress       string
	RegistrationPath    string
	HealthTimeout       time.Duration
	HealthInterval      time.Duration
	RestartPods         bool
	SecretScope         string
	MountPath           string
	MetricsAddress      string
	Profiling           bool
	ProbesPerCheck      int
	EmptyBucketBudget   time.Duration
	ShowVersion         bool
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// AddFlags defines every flag on fs, bound to o; a flag's default is o's value after it.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix socket), created with mode 0600")
	fs.StringVar(&o.NodeID, "node-id", os.Getenv("CSI_NODE_NAME"), "node name reported by NodeGetInfo (default $CSI_NODE_NAME)")
	fs.StringVar(&o.Mode, "mode", "node", "which CSI services to serve: node or controller")
	fs.StringVar(&o.SystemdSocket, "systemd-socket", "/run/systemd/private", "systemd's private D-Bus socket (systemd mount mode)")
	fs.StringVar(&o.Proxy.HTTPS, strings.TrimPrefix(proxyenv.FlagHTTPS, "--"), "", "proxy of https S3 endpoints, http://host:port (mount-s3 gets HTTPS_PROXY; the controller's S3 client uses it); empty: none. Nothing is read from this process's environment")
	fs.StringVar(&o.Proxy.HTTP, strings.TrimPrefix(proxyenv.FlagHTTP, "--"), "", "proxy of http S3 endpoints, http://host:port (mount-s3 gets HTTP_PROXY); empty: none")
	fs.StringVar(&o.Proxy.NoProxy, strings.TrimPrefix(proxyenv.FlagNoProxy, "--"), "", "hosts, domains (.example.com), IPs and CIDRs reached without the proxy, comma-separated (mount-s3 gets NO_PROXY); loopback is always reached directly by the controller")
	o.ResourceFlags = map[string]*string{}
	for _, attr := range mountresources.Attributes() {
		v := new(string)
		o.ResourceFlags[attr] = v
		fs.StringVar(v, strings.TrimPrefix(mountresources.Flags[attr], "--"), "", "systemd mount mode: mount-s3's default "+resourceFlagHelp[attr]+" (a Kubernetes quantity; empty: none), set on its unit; the volume attribute "+attr+" overrides it (pod mode: the Pod Reconciler's flag of the same name)")
	}
	fs.StringVar(&o.CacheSizeLimit, "mountpoint-cache-size-limit", "", "systemd mount mode: the size a mount's cache directory may take (a Kubernetes quantity, at least 128Mi; empty: mount-s3's own default); mount-s3's --max-cache-size is set or lowered to a tenth (at least 64Mi) below it, as the Pod Reconciler's flag of the same name does for a Mountpoint Pod's cache volume")
	fs.StringVar(&o.SliceMemoryMax, "systemd-slice-memory-max", "", "systemd mount mode: MemoryMax of the s3csi.slice every mount-s3 unit runs in, a node-wide cap of their memory together (a Kubernetes quantity; empty: none)")
	fs.StringVar(&o.SliceCPULimit, "systemd-slice-cpu-limit", "", "systemd mount mode: CPU quota of s3csi.slice, in CPUs (a Kubernetes quantity such as 2 or 1500m; empty: none)")
	fs.StringVar(&o.CredentialsDir, "systemd-credentials-dir", "", "systemd mount mode: host directory (a tmpfs such as /run/s3.csi.scality.com, seen by the plugin at the same path) holding each mount's credential files, so they never reach the node's disk and a reboot clears them; empty: each mount's state directory, as earlier releases (and their charts, which do not mount such a directory) do")
	fs.StringVar(&o.MountS3User, "mount-s3-user", "", "systemd mount mode, with the descriptor hand-over (--fuse-helper-path): the system user mount-s3 runs as, created on the host (systemd-sysusers, else useradd) when missing; it reads its mount's files in --systemd-credentials-dir and writes its cache in --systemd-cache-dir, both required with it; empty: root, without capabilities")
	fs.BoolVar(&o.ProtectSystem, "mount-s3-protect-system", false, "systemd mount mode, with the descriptor hand-over (--fuse-helper-path): each mount unit gets a mount namespace of its own in which the node's file systems are read-only but for the mount's cache (ProtectSystem=strict), with a private /tmp and /dev, no /home and the kernel protections; it costs kernel memory for a copy of the node's mount table per unit, so leave it off on nodes with hundreds of mounts (docs/security.md)")
	fs.StringVar(&o.CacheDir, "systemd-cache-dir", "", "systemd mount mode: host directory on disk (e.g. /var/cache/s3.csi.scality.com, seen by the plugin at the same path) holding the cache directory of each mount whose mount-s3 runs as --mount-s3-user; empty: the mount's state directory, which only root can reach")
	fs.StringVar(&o.MountS3Path, "mount-s3-path", "/opt/mountpoint-s3-csi/bin/mount-s3", "host path of the mount-s3 binary (systemd mount mode)")
	fs.StringVar(&o.FuseHelperPath, "fuse-helper-path", "auto", "systemd mount mode: host path of scality-fuse-helper (install-mp copies it next to mount-s3): each mount unit gets its FUSE connection from it and runs mount-s3 without any capability, on systemd 246 or later; auto: next to --mount-s3-path; empty: mount-s3 mounts FUSE itself, holding CAP_SYS_ADMIN")
	fs.StringVar(&o.UmountPath, "umount-path", "/bin/umount", "host path of umount(8), run as a transient unit to unmount (systemd mount mode)")
	fs.StringVar(&o.MountPath, "mount-path", "/bin/mount", "host path of mount(8), run by each mount unit to bind mount-s3's mount onto the target (systemd mount mode)")
	fs.StringVar(&o.KubeletPath, "kubelet-path", "/var/lib/kubelet", "kubelet root directory; the plugin must see it at the same path as the host")
	fs.StringVar(&o.S3EndpointURL, "s3-endpoint-url", os.Getenv("AWS_ENDPOINT_URL"), "S3 endpoint URL given to mount-s3 (default $AWS_ENDPOINT_URL; empty: mount-s3's default AWS endpoint)")
	fs.StringVar(&o.S3Region, "s3-region", envOr("AWS_REGION", "us-east-1"), "S3 region given to mount-s3 (default $AWS_REGION, else us-east-1)")
	fs.Int64Var(&o.MaxVolumesPerNode, "max-volumes-per-node", 0, "volume limit reported by NodeGetInfo; 0 means no limit")
	fs.DurationVar(&o.MountTimeout, "mount-timeout", 60*time.Second, "how long mount-s3 may take to mount before the publish fails")
	fs.DurationVar(&o.SystemdTimeout, "systemd-timeout", 30*time.Second, "systemd mode: how long one D-Bus call to systemd may take before the operation fails Unavailable (a stuck systemd must not hang publishes); a connection attempt is bounded to 5s")
	fs.StringVar(&o.S3CABundle, "s3-ca-bundle", "", "PEM file of CA certificates trusted for --s3-endpoint-url: by the controller's S3 client in addition to the system ones; by mount-s3 in both mount modes instead of them (AWS_CA_BUNDLE, mount-s3's --ca-bundle, which replaces its trust store)")
	fs.DurationVar(&o.EmptyBucketBudget, "empty-bucket-budget", 30*time.Second, "controller mode: longest time one DeleteVolume spends emptying a bucket (bucketDeletionPolicy deleteWithObjects) before it returns Aborted and the provisioner retries; the call's own deadline shortens it")
	fs.StringVar(&o.DefaultMounter, "default-mounter", string(mountmode.Default), "node mode: the cluster default mount mode, systemd or pod; the Node's s3.csi.scality.com/mounter label overrides it")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "node mode: kubeconfig for the Kubernetes API (default: the in-cluster service account when in a pod, else none: systemd mode only)")
	fs.StringVar(&o.MountpointNamespace, "mountpoint-namespace", "mount-s3", "node mode: namespace of the Mountpoint Pods")
	fs.DurationVar(&o.PodSweepInterval, "pod-sweep-interval", 2*time.Minute, "node mode: how often shared pod-mode mounts are checked for retirement and leftovers")
	fs.DurationVar(&o.ApiTimeout, "api-timeout", 30*time.Second, "node mode: how long start-up waits for the Kubernetes informers before pod mode is declared unavailable")
	fs.DurationVar(&o.FallbackAfter, "systemd-fallback-after", 0, "node mode: mount a new pod-mode volume through systemd mode when its Mountpoint Pod has been unschedulable this long (the volume then stays in systemd mode until its workload is recreated); 0: off. Needs systemd mode on the node, and less than kubelet's 2-minute publish deadline")
	fs.DurationVar(&o.AttachmentWait, "attachment-wait", pod.DefaultAttachmentWait, "node mode: how long a pod-mode publish waits for the controller to attach its workload to a Mountpoint Pod before it fails (kubelet retries; a publish of a deleted pod thus stops holding the volume)")
	fs.BoolVar(&o.PodMounter, "pod-mounter", true, "node mode: run pod mode (attachment and Mountpoint Pod informers, the pod unmounter); false on clusters where no node uses pod mode, so the plugin needs no access to Mountpoint Pods")
	fs.BoolVar(&o.SystemdMounter, "systemd-mounter", true, "node mode: run systemd mode (mount-s3 as transient units over --systemd-socket); false on clusters where no node uses systemd mode, so the plugin never dials systemd")
	fs.StringVar(&o.HealthAddress, "health-address", "", "node mode: address of /healthz, the plugin's own Probe for kubelet's liveness probe, e.g. :9808 (none when empty: the livenessprobe sidecar serves it)")
	fs.StringVar(&o.RegistrationPath, "kubelet-registration-path", "", "node mode: register with kubelet by itself (no node-driver-registrar): the host path of the CSI socket as kubelet sees it, e.g. /var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock; the registration socket goes to <kubelet-path>/plugins_registry (none when empty)")
	fs.DurationVar(&o.HealthTimeout, "health-timeout", 5*time.Second, "node mode: how long mount-s3 has to answer a liveness check (statfs) before its mount counts as dead")
	fs.StringVar(&o.SecretScope, "node-publish-secret-scope", secretscope.Claim, "node mode: where a volume's node-publish secret may live: "+secretscope.Claim+" (in its claim's namespace, unless the PV's volume attribute "+secretscope.Attribute+" is "+secretscope.Any+"; needs persistentvolumes get) or "+secretscope.Any+" (anywhere: any namespace that can claim the PV mounts with the secret)")
	fs.BoolVar(&o.RestartPods, "restart-pods", false, "node mode: let the recovery policy restart-pod (volume attribute mountRecovery) delete a workload pod whose containers cannot see a repaired mount; needs pods get/delete and persistentvolumeclaims get (Helm node.restartPods binds them); when false such volumes are repaired only, with an Event saying so")
	fs.DurationVar(&o.HealthInterval, "health-check-interval", 2*time.Second, "node mode: how often every published mount is checked, and a dead one mounted again, without waiting for kubelet (besides the checks systemd's unit signals and Mountpoint Pod changes trigger); 0 turns the monitor off: dead mounts are then repaired by kubelet's republish only")
	fs.IntVar(&o.ProbesPerCheck, "health-probes-per-check", mountmonitor.DefaultProbesPerCheck, "node mode: at most this many mount-s3 daemons are asked to answer (statfs) at each periodic check, those asked longest ago first, so a node with many mounts probes each every few checks; a daemon that exits is seen at once anyway (systemd's unit signal, the Mountpoint Pod's mount.err), and every check still looks every mount up in the mount table; 0 probes every daemon at every check")
	fs.StringVar(&o.MetricsAddress, "metrics-address", "", "address of the Prometheus endpoint (/metrics), e.g. :9809 on a node, :9810 for the controller (none when empty)")
	fs.BoolVar(&o.Profiling, "profiling", false, "node mode: also serve Go's profiles (/debug/pprof/) on --metrics-address, for measuring the plugin; off by default")
	fs.BoolVar(&o.ShowVersion, "version", false, "print the version and exit")
}

// Validate checks the parsed flags, as main does before it starts anything, and returns
// every problem found (joined), each naming its flag; it fills the parsed resource forms.
func (o *Options) Validate() error {
	var errs []error
	switch o.Mode {
	case "node":
		if o.NodeID == "" {
			errs = append(errs, errors.New("--node-id (or $CSI_NODE_NAME) is required in node mode"))
		}
	case "controller":
		if o.EmptyBucketBudget <= 0 {
			errs = append(errs, errors.New("--empty-bucket-budget must be positive"))
		}
	default:
		errs = append(errs, fmt.Errorf("--mode must be node or controller, not %q", o.Mode))
	}
	if o.RegistrationPath != "" && !filepath.IsAbs(o.RegistrationPath) {
		errs = append(errs, fmt.Errorf("--kubelet-registration-path must be an absolute path, not %q", o.RegistrationPath))
	}
	if h := o.FuseHelper(); h != "" && !filepath.IsAbs(h) {
		errs = append(errs, fmt.Errorf("--fuse-helper-path must be an absolute path, auto or empty, not %q", o.FuseHelperPath))
	}
	for name, p := range map[string]string{"--kubelet-path": o.KubeletPath, "--mount-s3-path": o.MountS3Path, "--umount-path": o.UmountPath, "--mount-path": o.MountPath, "--systemd-socket": o.SystemdSocket} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, not %q", name, p))
		}
	}
	if o.S3EndpointURL != "" {
		u, err := url.Parse(o.S3EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--s3-endpoint-url must be an http(s) URL, not %q", o.S3EndpointURL))
		}
	}
	if o.S3Region == "" {
		errs = append(errs, errors.New("--s3-region must not be empty"))
	}
	if o.CredentialsDir != "" && !filepath.IsAbs(o.CredentialsDir) {
		errs = append(errs, fmt.Errorf("--systemd-credentials-dir must be an absolute path or empty, not %q", o.CredentialsDir))
	}
	if o.CacheDir != "" && !filepath.IsAbs(o.CacheDir) {
		errs = append(errs, fmt.Errorf("--systemd-cache-dir must be an absolute path or empty, not %q", o.CacheDir))
	}
	if o.MountS3User != "" {
		if err := sysuser.ValidateName(o.MountS3User); err != nil {
			errs = append(errs, fmt.Errorf("--mount-s3-user %w", err))
		}
		if o.CredentialsDir == "" || o.CacheDir == "" {
			errs = append(errs, errors.New("--mount-s3-user needs --systemd-credentials-dir and --systemd-cache-dir (Helm sets both), or leave it empty to run mount-s3 as root"))
		}
	}
	if o.ProtectSystem {
		if o.FuseHelperPath == "" {
			errs = append(errs, errors.New("--mount-s3-protect-system needs the descriptor hand-over: set --fuse-helper-path (auto: next to --mount-s3-path), or leave --mount-s3-protect-system off"))
		}
		for _, f := range []struct{ flag, path string }{
			{"--kubelet-path", o.KubeletPath}, {"--mount-s3-path", o.MountS3Path}, {"--fuse-helper-path", o.FuseHelper()},
			{"--systemd-credentials-dir", o.CredentialsDir}, {"--systemd-cache-dir", o.CacheDir},
		} {
			for _, hidden := range systemd.HiddenByProtection {
				if f.path == hidden || strings.HasPrefix(f.path, hidden+"/") {
					errs = append(errs, fmt.Errorf("%s %q is below %s, which a mount unit with --mount-s3-protect-system sees empty (PrivateTmp, ProtectHome): move it elsewhere on the host, or leave --mount-s3-protect-system off", f.flag, f.path, hidden))
				}
			}
		}
	}
	values := map[string]string{}
	for attr, v := range o.ResourceFlags {
		values[attr] = *v
	}
	var err error
	if o.MountResources, err = mountresources.FromFlags(values); err != nil {
		errs = append(errs, err)
	}
	if _, o.MaxCacheMiB, err = mountresources.ParseCacheLimit("--mountpoint-cache-size-limit", o.CacheSizeLimit); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		name, value string
		into        *resource.Quantity
	}{{"--systemd-slice-memory-max", o.SliceMemoryMax, &o.SliceCap.Memory}, {"--systemd-slice-cpu-limit", o.SliceCPULimit, &o.SliceCap.CPU}} {
		if f.value == "" {
			continue
		}
		if q, err := mountresources.Parse(f.name, f.value); err != nil {
			errs = append(errs, err)
		} else {
			*f.into = q
		}
	}
	if p, err := proxyenv.Parse(o.Proxy); err != nil {
		errs = append(errs, err)
	} else {
		o.Proxy = p
	}
	if o.SecretScope != secretscope.Claim && o.SecretScope != secretscope.Any {
		errs = append(errs, fmt.Errorf("--node-publish-secret-scope must be %s or %s, not %q", secretscope.Claim, secretscope.Any, o.SecretScope))
	}
	if o.MaxVolumesPerNode < 0 {
		errs = append(errs, errors.New("--max-volumes-per-node must not be negative"))
	}
	if o.MountTimeout <= 0 {
		errs = append(errs, errors.New("--mount-timeout must be positive"))
	}
	if o.SystemdTimeout <= 0 {
		errs = append(errs, errors.New("--systemd-timeout must be positive"))
	}
	if _, err := mountmode.Parse(o.DefaultMounter); err != nil {
		errs = append(errs, fmt.Errorf("--default-mounter: %w", err))
	}
	if o.PodSweepInterval <= 0 || o.ApiTimeout <= 0 || o.HealthTimeout <= 0 || o.HealthInterval < 0 || o.AttachmentWait <= 0 {
		errs = append(errs, errors.New("--pod-sweep-interval, --api-timeout, --attachment-wait and --health-timeout must be positive, --health-check-interval not negative"))
	}
	if o.FallbackAfter < 0 || o.FallbackAfter > maxFallbackAfter {
		errs = append(errs, fmt.Errorf("--systemd-fallback-after must be between 0 (off) and %v (kubelet ends a publish after 2 minutes, and the systemd mount needs the rest), not %v", maxFallbackAfter, o.FallbackAfter))
	}
	if o.ProbesPerCheck < 0 {
		errs = append(errs, fmt.Errorf("--health-probes-per-check must not be negative, not %d (0 probes every mount-s3 at every check)", o.ProbesPerCheck))
	}
	if o.S3CABundle != "" && !filepath.IsAbs(o.S3CABundle) {
		errs = append(errs, fmt.Errorf("--s3-ca-bundle must be an absolute path, not %q", o.S3CABundle))
	}
	return errors.Join(errs...)
}

// ReadCABundle reads a PEM bundle and checks it holds at least one certificate.
func ReadCABundle(path string) ([]byte, error) {
	pem, err := os.ReadFile(path) //nolint:gosec // G304: the operator's --ca-bundle file
	if err != nil {
		return nil, fmt.Errorf("--s3-ca-bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--s3-ca-bundle: %s holds no PEM certificate", path)
	}
	return pem, nil
}

// FuseHelper is --fuse-helper-path resolved: auto is scality-fuse-helper next to mount-s3.
func (o *Options) FuseHelper() string {
	if o.FuseHelperPath == "auto" {
		return filepath.Join(filepath.Dir(o.MountS3Path), "scality-fuse-helper")
	}
	return o.FuseHelperPath
}

// Parse parses args (the binary's arguments, without its name) with the flags of AddFlags and
// validates them: the start-up checks of main, short of reading files and connecting. Flags of
// klog (-v and the like) are checked as main checks them and change nothing (klogflags): safe
// for concurrent use.
func Parse(args []string) (*Options, error) {
	fs := flag.NewFlagSet("scality-s3-csi-driver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	klogflags.AddChecked(fs)
	o := &Options{}
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.Validate()
}
