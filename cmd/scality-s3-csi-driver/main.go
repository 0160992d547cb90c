// Command scality-s3-csi-driver is the CSI plugin: Identity + Node services on a node
// (--mode=node), Identity + Controller services in the controller Deployment (--mode=controller,
// dynamic provisioning: a bucket per volume). Flags are the only configuration; a few default to
// the environment (CSI_NODE_NAME, AWS_ENDPOINT_URL, AWS_REGION). Driver-level credentials come
// from the standard AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/s3csi/s3-csi-driver/mounter/pod"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/driver"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountmonitor"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/nodeplugin"
	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
	"github.com/s3csi/s3-csi-driver/pkg/sysuser"
	"github.com/s3csi/s3-csi-driver/pkg/version"
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

type options struct {
	endpoint       string
	nodeID         string
	mode           string
	systemdSocket  string
	credentialsDir string
	mountS3User    string
	cacheDir       string
	// mount-s3's default resources (systemd mode) and the node-wide cap of its slice, as
	// given, then as parsed by validate.
	resourceFlags  map[string]*string
	sliceMemoryMax string
	cacheSizeLimit string
	maxCacheMiB    uint64
	sliceCPULimit  string
	mountResources corev1.ResourceRequirements
	sliceCap       systemd.SliceCap
	// proxy of every S3 request: mount-s3's in both modes and the controller's.
	proxy               proxyenv.Config
	mountS3Path         string
	fuseHelperPath      string
	umountPath          string
	kubeletPath         string
	s3EndpointURL       string
	s3Region            string
	maxVolumesPerNode   int64
	mountTimeout        time.Duration
	systemdTimeout      time.Duration
	s3CABundle          string
	defaultMounter      string
	kubeconfig          string
	mountpointNamespace string
	podSweepInterval    time.Duration
	apiTimeout          time.Duration
	attachmentWait      time.Duration
	fallbackAfter       time.Duration
	podMounter          bool
	systemdMounter      bool
	healthAddress       string
	registrationPath    string
	healthTimeout       time.Duration
	healthInterval      time.Duration
	restartPods         bool
	secretScope         string
	mountPath           string
	metricsAddress      string
	profiling           bool
	probesPerCheck      int
	emptyBucketBudget   time.Duration
	showVersion         bool
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix socket), created with mode 0600")
	fs.StringVar(&o.nodeID, "node-id", os.Getenv("CSI_NODE_NAME"), "node name reported by NodeGetInfo (default $CSI_NODE_NAME)")
	fs.StringVar(&o.mode, "mode", "node", "which CSI services to serve: node or controller")
	fs.StringVar(&o.systemdSocket, "systemd-socket", "/run/systemd/private", "systemd's private D-Bus socket (systemd mount mode)")
	fs.StringVar(&o.proxy.HTTPS, strings.TrimPrefix(proxyenv.FlagHTTPS, "--"), "", "proxy of https S3 endpoints, http://host:port (mount-s3 gets HTTPS_PROXY; the controller's S3 client uses it); empty: none. Nothing is read from this process's environment")
	fs.StringVar(&o.proxy.HTTP, strings.TrimPrefix(proxyenv.FlagHTTP, "--"), "", "proxy of http S3 endpoints, http://host:port (mount-s3 gets HTTP_PROXY); empty: none")
	fs.StringVar(&o.proxy.NoProxy, strings.TrimPrefix(proxyenv.FlagNoProxy, "--"), "", "hosts, domains (.example.com), IPs and CIDRs reached without the proxy, comma-separated (mount-s3 gets NO_PROXY); loopback is always reached directly by the controller")
	o.resourceFlags = map[string]*string{}
	for _, attr := range mountresources.Attributes() {
		v := new(string)
		o.resourceFlags[attr] = v
		fs.StringVar(v, strings.TrimPrefix(mountresources.Flags[attr], "--"), "", "systemd mount mode: mount-s3's default "+resourceFlagHelp[attr]+" (a Kubernetes quantity; empty: none), set on its unit; the volume attribute "+attr+" overrides it (pod mode: the Pod Reconciler's flag of the same name)")
	}
	fs.StringVar(&o.cacheSizeLimit, "mountpoint-cache-size-limit", "", "systemd mount mode: the size a mount's cache directory may take (a Kubernetes quantity, at least 128Mi; empty: mount-s3's own default); mount-s3's --max-cache-size is set or lowered to a tenth (at least 64Mi) below it, as the Pod Reconciler's flag of the same name does for a Mountpoint Pod's cache volume")
	fs.StringVar(&o.sliceMemoryMax, "systemd-slice-memory-max", "", "systemd mount mode: MemoryMax of the s3csi.slice every mount-s3 unit runs in, a node-wide cap of their memory together (a Kubernetes quantity; empty: none)")
	fs.StringVar(&o.sliceCPULimit, "systemd-slice-cpu-limit", "", "systemd mount mode: CPU quota of s3csi.slice, in CPUs (a Kubernetes quantity such as 2 or 1500m; empty: none)")
	fs.StringVar(&o.credentialsDir, "systemd-credentials-dir", "", "systemd mount mode: host directory (a tmpfs such as /run/s3.csi.scality.com, seen by the plugin at the same path) holding each mount's credential files, so they never reach the node's disk and a reboot clears them; empty: each mount's state directory, as earlier releases (and their charts, which do not mount such a directory) do")
	fs.StringVar(&o.mountS3User, "mount-s3-user", "", "systemd mount mode, with the descriptor hand-over (--fuse-helper-path): the system user mount-s3 runs as, created on the host (systemd-sysusers, else useradd) when missing; it reads its mount's files in --systemd-credentials-dir and writes its cache in --systemd-cache-dir, both required with it; empty: root, without capabilities")
	fs.StringVar(&o.cacheDir, "systemd-cache-dir", "", "systemd mount mode: host directory on disk (e.g. /var/cache/s3.csi.scality.com, seen by the plugin at the same path) holding the cache directory of each mount whose mount-s3 runs as --mount-s3-user; empty: the mount's state directory, which only root can reach")
	fs.StringVar(&o.mountS3Path, "mount-s3-path", "/opt/mountpoint-s3-csi/bin/mount-s3", "host path of the mount-s3 binary (systemd mount mode)")
	fs.StringVar(&o.fuseHelperPath, "fuse-helper-path", "auto", "systemd mount mode: host path of scality-fuse-helper (install-mp copies it next to mount-s3): each mount unit gets its FUSE connection from it and runs mount-s3 without any capability, on systemd 246 or later; auto: next to --mount-s3-path; empty: mount-s3 mounts FUSE itself, holding CAP_SYS_ADMIN")
	fs.StringVar(&o.umountPath, "umount-path", "/bin/umount", "host path of umount(8), run as a transient unit to unmount (systemd mount mode)")
	fs.StringVar(&o.mountPath, "mount-path", "/bin/mount", "host path of mount(8), run by each mount unit to bind mount-s3's mount onto the target (systemd mount mode)")
	fs.StringVar(&o.kubeletPath, "kubelet-path", "/var/lib/kubelet", "kubelet root directory; the plugin must see it at the same path as the host")
	fs.StringVar(&o.s3EndpointURL, "s3-endpoint-url", os.Getenv("AWS_ENDPOINT_URL"), "S3 endpoint URL given to mount-s3 (default $AWS_ENDPOINT_URL; empty: mount-s3's default AWS endpoint)")
	fs.StringVar(&o.s3Region, "s3-region", envOr("AWS_REGION", "us-east-1"), "S3 region given to mount-s3 (default $AWS_REGION, else us-east-1)")
	fs.Int64Var(&o.maxVolumesPerNode, "max-volumes-per-node", 0, "volume limit reported by NodeGetInfo; 0 means no limit")
	fs.DurationVar(&o.mountTimeout, "mount-timeout", 60*time.Second, "how long mount-s3 may take to mount before the publish fails")
	fs.DurationVar(&o.systemdTimeout, "systemd-timeout", 30*time.Second, "systemd mode: how long one D-Bus call to systemd may take before the operation fails Unavailable (a stuck systemd must not hang publishes); a connection attempt is bounded to 5s")
	fs.StringVar(&o.s3CABundle, "s3-ca-bundle", "", "PEM file of CA certificates trusted for --s3-endpoint-url: by the controller's S3 client in addition to the system ones; by mount-s3 in both mount modes instead of them (AWS_CA_BUNDLE, mount-s3's --ca-bundle, which replaces its trust store)")
	fs.DurationVar(&o.emptyBucketBudget, "empty-bucket-budget", 30*time.Second, "controller mode: longest time one DeleteVolume spends emptying a bucket (bucketDeletionPolicy deleteWithObjects) before it returns Aborted and the provisioner retries; the call's own deadline shortens it")
	fs.StringVar(&o.defaultMounter, "default-mounter", string(mountmode.Default), "node mode: the cluster default mount mode, systemd or pod; the Node's s3.csi.scality.com/mounter label overrides it")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "node mode: kubeconfig for the Kubernetes API (default: the in-cluster service account when in a pod, else none: systemd mode only)")
	fs.StringVar(&o.mountpointNamespace, "mountpoint-namespace", "mount-s3", "node mode: namespace of the Mountpoint Pods")
	fs.DurationVar(&o.podSweepInterval, "pod-sweep-interval", 2*time.Minute, "node mode: how often shared pod-mode mounts are checked for retirement and leftovers")
	fs.DurationVar(&o.apiTimeout, "api-timeout", 30*time.Second, "node mode: how long start-up waits for the Kubernetes informers before pod mode is declared unavailable")
	fs.DurationVar(&o.fallbackAfter, "systemd-fallback-after", 0, "node mode: mount a new pod-mode volume through systemd mode when its Mountpoint Pod has been unschedulable this long (the volume then stays in systemd mode until its workload is recreated); 0: off. Needs systemd mode on the node, and less than kubelet's 2-minute publish deadline")
	fs.DurationVar(&o.attachmentWait, "attachment-wait", pod.DefaultAttachmentWait, "node mode: how long a pod-mode publish waits for the controller to attach its workload to a Mountpoint Pod before it fails (kubelet retries; a publish of a deleted pod thus stops holding the volume)")
	fs.BoolVar(&o.podMounter, "pod-mounter", true, "node mode: run pod mode (attachment and Mountpoint Pod informers, the pod unmounter); false on clusters where no node uses pod mode, so the plugin needs no access to Mountpoint Pods")
	fs.BoolVar(&o.systemdMounter, "systemd-mounter", true, "node mode: run systemd mode (mount-s3 as transient units over --systemd-socket); false on clusters where no node uses systemd mode, so the plugin never dials systemd")
	fs.StringVar(&o.healthAddress, "health-address", "", "node mode: address of /healthz, the plugin's own Probe for kubelet's liveness probe, e.g. :9808 (none when empty: the livenessprobe sidecar serves it)")
	fs.StringVar(&o.registrationPath, "kubelet-registration-path", "", "node mode: register with kubelet by itself (no node-driver-registrar): the host path of the CSI socket as kubelet sees it, e.g. /var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock; the registration socket goes to <kubelet-path>/plugins_registry (none when empty)")
	fs.DurationVar(&o.healthTimeout, "health-timeout", 5*time.Second, "node mode: how long mount-s3 has to answer a liveness check (statfs) before its mount counts as dead")
	fs.StringVar(&o.secretScope, "node-publish-secret-scope", secretscope.Claim, "node mode: where a volume's node-publish secret may live: "+secretscope.Claim+" (in its claim's namespace, unless the PV's volume attribute "+secretscope.Attribute+" is "+secretscope.Any+"; needs persistentvolumes get) or "+secretscope.Any+" (anywhere: any namespace that can claim the PV mounts with the secret)")
	fs.BoolVar(&o.restartPods, "restart-pods", false, "node mode: let the recovery policy restart-pod (volume attribute mountRecovery) delete a workload pod whose containers cannot see a repaired mount; needs pods get/delete and persistentvolumeclaims get (Helm node.restartPods binds them); when false such volumes are repaired only, with an Event saying so")
	fs.DurationVar(&o.healthInterval, "health-check-interval", 2*time.Second, "node mode: how often every published mount is checked, and a dead one mounted again, without waiting for kubelet (besides the checks systemd's unit signals and Mountpoint Pod changes trigger); 0 turns the monitor off: dead mounts are then repaired by kubelet's republish only")
	fs.IntVar(&o.probesPerCheck, "health-probes-per-check", mountmonitor.DefaultProbesPerCheck, "node mode: at most this many mount-s3 daemons are asked to answer (statfs) at each periodic check, those asked longest ago first, so a node with many mounts probes each every few checks; a daemon that exits is seen at once anyway (systemd's unit signal, the Mountpoint Pod's mount.err), and every check still looks every mount up in the mount table; 0 probes every daemon at every check")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "address of the Prometheus endpoint (/metrics), e.g. :9809 on a node, :9810 for the controller (none when empty)")
	fs.BoolVar(&o.profiling, "profiling", false, "node mode: also serve Go's profiles (/debug/pprof/) on --metrics-address, for measuring the plugin; off by default")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
}

func (o *options) validate() error {
	var errs []error
	switch o.mode {
	case "node":
		if o.nodeID == "" {
			errs = append(errs, errors.New("--node-id (or $CSI_NODE_NAME) is required in node mode"))
		}
	case "controller":
		if o.emptyBucketBudget <= 0 {
			errs = append(errs, errors.New("--empty-bucket-budget must be positive"))
		}
	default:
		errs = append(errs, fmt.Errorf("--mode must be node or controller, not %q", o.mode))
	}
	if o.registrationPath != "" && !filepath.IsAbs(o.registrationPath) {
		errs = append(errs, fmt.Errorf("--kubelet-registration-path must be an absolute path, not %q", o.registrationPath))
	}
	if h := o.fuseHelper(); h != "" && !filepath.IsAbs(h) {
		errs = append(errs, fmt.Errorf("--fuse-helper-path must be an absolute path, auto or empty, not %q", o.fuseHelperPath))
	}
	for name, p := range map[string]string{"--kubelet-path": o.kubeletPath, "--mount-s3-path": o.mountS3Path, "--umount-path": o.umountPath, "--mount-path": o.mountPath, "--systemd-socket": o.systemdSocket} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, not %q", name, p))
		}
	}
	if o.s3EndpointURL != "" {
		u, err := url.Parse(o.s3EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--s3-endpoint-url must be an http(s) URL, not %q", o.s3EndpointURL))
		}
	}
	if o.s3Region == "" {
		errs = append(errs, errors.New("--s3-region must not be empty"))
	}
	if o.credentialsDir != "" && !filepath.IsAbs(o.credentialsDir) {
		errs = append(errs, fmt.Errorf("--systemd-credentials-dir must be an absolute path or empty, not %q", o.credentialsDir))
	}
	if o.cacheDir != "" && !filepath.IsAbs(o.cacheDir) {
		errs = append(errs, fmt.Errorf("--systemd-cache-dir must be an absolute path or empty, not %q", o.cacheDir))
	}
	if o.mountS3User != "" {
		if err := sysuser.ValidateName(o.mountS3User); err != nil {
			errs = append(errs, fmt.Errorf("--mount-s3-user %w", err))
		}
		if o.credentialsDir == "" || o.cacheDir == "" {
			errs = append(errs, errors.New("--mount-s3-user needs --systemd-credentials-dir and --systemd-cache-dir (Helm sets both), or leave it empty to run mount-s3 as root"))
		}
	}
	values := map[string]string{}
	for attr, v := range o.resourceFlags {
		values[attr] = *v
	}
	var err error
	if o.mountResources, err = mountresources.FromFlags(values); err != nil {
		errs = append(errs, err)
	}
	if _, o.maxCacheMiB, err = mountresources.ParseCacheLimit("--mountpoint-cache-size-limit", o.cacheSizeLimit); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		name, value string
		into        *resource.Quantity
	}{{"--systemd-slice-memory-max", o.sliceMemoryMax, &o.sliceCap.Memory}, {"--systemd-slice-cpu-limit", o.sliceCPULimit, &o.sliceCap.CPU}} {
		if f.value == "" {
			continue
		}
		if q, err := mountresources.Parse(f.name, f.value); err != nil {
			errs = append(errs, err)
		} else {
			*f.into = q
		}
	}
	if _, err := proxyenv.Parse(o.proxy); err != nil {
		errs = append(errs, err)
	}
	if o.secretScope != secretscope.Claim && o.secretScope != secretscope.Any {
		errs = append(errs, fmt.Errorf("--node-publish-secret-scope must be %s or %s, not %q", secretscope.Claim, secretscope.Any, o.secretScope))
	}
	if o.maxVolumesPerNode < 0 {
		errs = append(errs, errors.New("--max-volumes-per-node must not be negative"))
	}
	if o.mountTimeout <= 0 {
		errs = append(errs, errors.New("--mount-timeout must be positive"))
	}
	if o.systemdTimeout <= 0 {
		errs = append(errs, errors.New("--systemd-timeout must be positive"))
	}
	if _, err := mountmode.Parse(o.defaultMounter); err != nil {
		errs = append(errs, fmt.Errorf("--default-mounter: %w", err))
	}
	if o.podSweepInterval <= 0 || o.apiTimeout <= 0 || o.healthTimeout <= 0 || o.healthInterval < 0 || o.attachmentWait <= 0 {
		errs = append(errs, errors.New("--pod-sweep-interval, --api-timeout, --attachment-wait and --health-timeout must be positive, --health-check-interval not negative"))
	}
	if o.fallbackAfter < 0 || o.fallbackAfter > maxFallbackAfter {
		errs = append(errs, fmt.Errorf("--systemd-fallback-after must be between 0 (off) and %v (kubelet ends a publish after 2 minutes, and the systemd mount needs the rest), not %v", maxFallbackAfter, o.fallbackAfter))
	}
	if o.probesPerCheck < 0 {
		errs = append(errs, fmt.Errorf("--health-probes-per-check must not be negative, not %d (0 probes every mount-s3 at every check)", o.probesPerCheck))
	}
	if o.s3CABundle != "" && !filepath.IsAbs(o.s3CABundle) {
		errs = append(errs, fmt.Errorf("--s3-ca-bundle must be an absolute path, not %q", o.s3CABundle))
	}
	return errors.Join(errs...)
}

// driverCredentials reads the driver-level credentials from the standard AWS variables: none
// (nil) or a complete, valid pair.
func driverCredentials() (*credentials.Credentials, error) {
	c := credentials.Credentials{
		AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
	}
	if c == (credentials.Credentials{}) {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("driver credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN: %w", err)
	}
	return &c, nil
}

func main() {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	var o options
	o.addFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if o.showVersion {
		fmt.Printf("%s %s\n", version.DriverName, version.Version)
		return
	}
	if err := o.validate(); err != nil {
		klog.ErrorS(err, "Invalid flags")
		os.Exit(2)
	}
	// Pod mode's informers come from controller-runtime: route its logs to klog (unset, it
	// prints a stack trace at start and drops every later message).
	ctrllog.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "Driver stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	creds, err := driverCredentials()
	if err != nil {
		return err
	}
	if o.mode == "controller" {
		return runController(ctx, o, creds)
	}
	klog.InfoS("Starting", "driver", version.DriverName, "version", version.Version, "mode", o.mode, "nodeID", o.nodeID, "driverCredentials", creds != nil, "defaultMounter", o.defaultMounter)
	kube, err := o.kubeConfig()
	if err != nil {
		return err
	}
	defaultMode, _ := mountmode.Parse(o.defaultMounter) // validated
	var caBundle []byte
	if o.s3CABundle != "" {
		if caBundle, err = readCABundle(o.s3CABundle); err != nil {
			return err
		}
	}
	return nodeplugin.Run(ctx, nodeplugin.Config{
		Endpoint:              o.endpoint,
		NodeID:                o.nodeID,
		KubeletPath:           o.kubeletPath,
		MaxVolumesPerNode:     o.maxVolumesPerNode,
		S3EndpointURL:         o.s3EndpointURL,
		S3Region:              o.s3Region,
		DriverCredentials:     creds,
		CABundle:              caBundle,
		DefaultMode:           defaultMode,
		SystemdSocket:         o.systemdSocket,
		MountS3Path:           o.mountS3Path,
		FuseHelperPath:        o.fuseHelper(),
		UmountPath:            o.umountPath,
		MountTimeout:          o.mountTimeout,
		SystemdTimeout:        o.systemdTimeout,
		Kube:                  kube,
		MountpointNamespace:   o.mountpointNamespace,
		PodSweepInterval:      o.podSweepInterval,
		APITimeout:            o.apiTimeout,
		AttachmentWait:        o.attachmentWait,
		SystemdFallbackAfter:  o.fallbackAfter,
		DisablePodMode:        !o.podMounter,
		DisableSystemdMode:    !o.systemdMounter,
		HealthAddress:         o.healthAddress,
		RegistrationEndpoint:  o.registrationPath,
		HealthTimeout:         o.healthTimeout,
		HealthCheckInterval:   o.healthInterval,
		HealthProbesPerCheck:  probesPerCheck(o.probesPerCheck),
		RestartPods:           o.restartPods,
		SecretScope:           o.secretScope,
		SystemdCredentialsDir: o.credentialsDir,
		MountS3User:           o.mountS3User,
		SystemdCacheDir:       o.cacheDir,
		MountResources:        o.mountResources,
		Proxy:                 o.proxy,
		SystemdSliceCap:       o.sliceCap,
		SystemdMaxCacheMiB:    o.maxCacheMiB,
		MountPath:             o.mountPath,
		MetricsAddress:        o.metricsAddress,
		Profiling:             o.profiling,
	})
}

// readCABundle reads a PEM bundle and checks it holds at least one certificate.
func readCABundle(path string) ([]byte, error) {
	pem, err := os.ReadFile(path) //nolint:gosec // G304: the operator's --ca-bundle file
	if err != nil {
		return nil, fmt.Errorf("--s3-ca-bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--s3-ca-bundle: %s holds no PEM certificate", path)
	}
	return pem, nil
}

// kubeConfig returns the Kubernetes connection of a node plugin: --kubeconfig, else the
// in-cluster service account when running in a pod, else none (systemd mode only).
func (o *options) kubeConfig() (*rest.Config, error) {
	if o.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	return rest.InClusterConfig()
}

// runController serves Identity + Controller: no node service, no systemd. Probe always
// reports ready: the controller's health is its own, and an S3 outage must not restart it (its
// calls fail with Unavailable and the provisioner retries); it may also have no credentials of
// its own to probe the store with.
func runController(ctx context.Context, o options, creds *credentials.Credentials) error {
	klog.InfoS("Starting", "driver", version.DriverName, "version", version.Version, "mode", o.mode,
		"s3Endpoint", o.s3EndpointURL, "s3Region", o.s3Region, "s3CABundle", o.s3CABundle, "driverCredentials", creds != nil)
	cfg := s3.Config{EndpointURL: o.s3EndpointURL, Region: o.s3Region, Proxy: o.proxy}
	if o.s3CABundle != "" {
		pem, err := os.ReadFile(o.s3CABundle)
		if err != nil {
			return fmt.Errorf("--s3-ca-bundle: %w", err)
		}
		cfg.CABundle = pem
	}
	store, err := s3.NewStore(cfg)
	if err != nil {
		return err
	}
	cs, err := driver.NewControllerServer(driver.ControllerConfig{
		DriverCredentials: creds,
		EmptyBudget:       o.emptyBucketBudget,
		NewClient: func(c credentials.Credentials, region string) driver.BucketClient {
			return store.Client(c, region)
		},
	})
	if err != nil {
		return err
	}
	srv, err := driver.NewServer(o.endpoint)
	if err != nil {
		return err
	}
	if o.metricsAddress != "" {
		if err := serveControllerMetrics(ctx, o.metricsAddress, cs.Collectors()); err != nil {
			return err
		}
	}
	srv.RegisterIdentity(driver.NewIdentityServer(true, nil))
	srv.RegisterController(cs)
	return srv.Run(ctx)
}

// serveControllerMetrics serves the controller's metrics on address (/metrics) from a registry
// of their own, as the node plugin does, until ctx ends. A failing listener is an error at
// start; a server that stops later is logged.
func serveControllerMetrics(ctx context.Context, address string, collectors []prometheus.Collector) error {
	reg := prometheus.NewRegistry()
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	klog.InfoS("Serving metrics", "address", lis.Addr().String())
	go func() {
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Metrics server stopped")
		}
	}()
	return nil
}

// probesPerCheck maps --health-probes-per-check (0: every daemon) to
// mountmonitor.Config.ProbesPerCheck (negative: every daemon).
func probesPerCheck(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

// fuseHelper is --fuse-helper-path resolved: auto is scality-fuse-helper next to mount-s3.
func (o *options) fuseHelper() string {
	if o.fuseHelperPath == "auto" {
		return filepath.Join(filepath.Dir(o.mountS3Path), "scality-fuse-helper")
	}
	return o.fuseHelperPath
}
