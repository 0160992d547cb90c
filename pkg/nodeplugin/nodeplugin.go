// Package nodeplugin assembles the node plugin: the systemd mounter, pod mode (attachment and
// Mountpoint Pod informers, the pod mounter and its unmounter) when the Kubernetes API is
// reachable, the node's mode watcher, the router in front of both mounters, the CSI servers and
// the metrics endpoint. Run returns errors; it never exits the process.
package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/mounter/pod"
	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/driver"
	"github.com/s3csi/s3-csi-driver/pkg/inflight"
	"github.com/s3csi/s3-csi-driver/pkg/memreturn"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountmonitor"
	"github.com/s3csi/s3-csi-driver/pkg/nodemode"
	"github.com/s3csi/s3-csi-driver/pkg/podrestart"
	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/registration"
	"github.com/s3csi/s3-csi-driver/pkg/safetext"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Config is everything the node plugin needs.
type Config struct {
	Endpoint          string
	NodeID            string
	KubeletPath       string
	MaxVolumesPerNode int64
	S3EndpointURL     string
	S3Region          string
	DriverCredentials *credentials.Credentials
	// CABundle (PEM) is trusted by mount-s3 for the S3 endpoint, in both modes (nil: system CAs).
	CABundle []byte
	// DefaultMode is the cluster default; the Node's label overrides it.
	DefaultMode mountmode.Mode

	// systemd mode
	// DisableSystemdMode leaves systemd mode out entirely: the plugin never dials systemd (for
	// nodes where no node uses it and the chart mounts no systemd socket). Publishing on a node
	// whose mode is systemd then fails with Unavailable.
	DisableSystemdMode bool
	SystemdSocket      string
	MountPath          string
	MountS3Path        string
	// FuseHelperPath is the host path of scality-fuse-helper (systemd.Config.FuseHelperPath).
	FuseHelperPath string
	UmountPath     string
	MountTimeout   time.Duration
	// SystemdTimeout bounds each D-Bus call to systemd (systemd.Config.CallTimeout).
	SystemdTimeout time.Duration

	// Kube is the Kubernetes connection (nil: none; the node then uses DefaultMode and only
	// systemd mode can work).
	Kube                *rest.Config
	MountpointNamespace string
	PodSweepInterval    time.Duration
	// APITimeout bounds how long start-up waits for the informers.
	APITimeout time.Duration
	// AttachmentWait bounds how long a pod-mode publish waits for the controller to attach its
	// workload before it fails and kubelet retries (pod.DefaultAttachmentWait when zero).
	AttachmentWait time.Duration
	// SystemdFallbackAfter, when positive and systemd mode works on this node, mounts a new
	// pod-mode volume through systemd mode once its Mountpoint Pod has been unschedulable that
	// long (mounter.ErrUnplaceable); 0 turns the fallback off.
	SystemdFallbackAfter time.Duration
	// DisablePodMode leaves pod mode out entirely (no informers on attachments or Mountpoint
	// Pods, no pod unmounter): for clusters where no node uses it. Publishing on a node whose
	// mode is pod then fails with Unavailable.
	DisablePodMode bool

	// MetricsAddress serves Prometheus metrics when not empty.
	MetricsAddress string
	// Profiling adds Go's profiles (net/http/pprof, under /debug/pprof/) to the metrics
	// endpoint: for measuring the plugin, never on by default (a profile shows memory).
	Profiling bool
	// HealthAddress serves /healthz (the plugin's own Probe) when not empty: kubelet's liveness
	// probe without the livenessprobe sidecar.
	HealthAddress string
	// RegistrationEndpoint, when not empty, makes the plugin register itself with kubelet (no
	// node-driver-registrar sidecar): it is the host path of the CSI socket as kubelet sees it;
	// the registration socket goes to <KubeletPath>/plugins_registry.
	RegistrationEndpoint string

	// HealthTimeout is how long mount-s3 has to answer a liveness check (mounthealth).
	HealthTimeout time.Duration
	// HealthCheckInterval is how often every published mount is checked (and a dead one
	// repaired) without waiting for kubelet; 0 turns the monitor off.
	HealthCheckInterval time.Duration
	// HealthProbesPerCheck bounds how many mount-s3 daemons a periodic check probes
	// (mountmonitor.Config.ProbesPerCheck: 0 for its default, negative for all).
	HealthProbesPerCheck int
	// RestartPods lets the recovery policy restart-pod delete workload pods (it needs the RBAC
	// the chart binds with node.restartPods); when false such volumes are repaired only.
	RestartPods bool
	// SystemdCredentialsDir is where systemd mode writes each mount's credential files (a
	// tmpfs); empty: in its state directory.
	SystemdCredentialsDir string
	// MountS3User is the system user systemd mode runs mount-s3 as (systemd.Config.MountS3User;
	// empty: root) and SystemdCacheDir where those mounts keep their caches.
	MountS3User, SystemdCacheDir string
	// ProtectSystem gives each systemd-mode mount unit a mount namespace of its own
	// (systemd.Config.ProtectSystem).
	ProtectSystem bool
	// MountResources are mount-s3's default requests and limits (systemd mode applies them to
	// each unit; a volume's attributes override them).
	MountResources corev1.ResourceRequirements
	// Proxy reaches every mount-s3 (HTTPS_PROXY, HTTP_PROXY, NO_PROXY); zero: none.
	Proxy proxyenv.Config
	// SystemdMaxCacheMiB bounds mount-s3's --max-cache-size in systemd mode (0: none).
	SystemdMaxCacheMiB uint64
	// SystemdSliceCap is the node-wide cap of the slice of every mount-s3 unit (zero: none).
	SystemdSliceCap systemd.SliceCap
	// SecretScope is where a node-publish Secret may live (secretscope.Claim or Any); Claim
	// without Kube refuses every publish with a node-publish Secret.
	SecretScope string
}

// Pod mode's workloads share their Mountpoint Pod's mount: the monitor handles them together.
var _ mountmonitor.Sharer = (*pod.Mounter)(nil)

// ErrLinuxOnly is what Run returns on other systems: the node plugin mounts FUSE, bind mounts
// and systemd units (the controller service, --mode=controller, runs anywhere).
var ErrLinuxOnly = errors.New("the node plugin runs on Linux only (FUSE, mount namespaces, systemd); --mode=controller runs anywhere")

// Run starts the node plugin and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if runtime.GOOS != "linux" {
		return ErrLinuxOnly
	}
	health := &mounthealth.Checker{Timeout: cfg.HealthTimeout}
	locks := &inflight.Set{}
	monitor := mountmonitor.New(mountmonitor.Config{Health: health, Locks: locks, Interval: cfg.HealthCheckInterval, ProbesPerCheck: cfg.HealthProbesPerCheck})
	unavailable := map[mountmode.Mode]string{}
	var sm *systemd.Mounter
	if cfg.DisableSystemdMode {
		unavailable[mountmode.Systemd] = "systemd mode is disabled on this node plugin (--systemd-mounter=false: Helm mounter.modesInUse lacks systemd)"
	} else {
		var err error
		sm, err = systemd.New(systemd.Config{
			SystemdSocket:  cfg.SystemdSocket,
			MountS3Path:    cfg.MountS3Path,
			FuseHelperPath: cfg.FuseHelperPath,
			UmountPath:     cfg.UmountPath,
			MountPath:      cfg.MountPath,
			StateDir:       filepath.Join(cfg.KubeletPath, "plugins", version.DriverName, "systemd"),
			// Beside the plugin directory, not in it: the container mounts that one at /csi too.
			StagingDir:     filepath.Join(cfg.KubeletPath, "plugins", version.DriverName+"-staging"),
			CredentialsDir: cfg.SystemdCredentialsDir,
			MountS3User:    cfg.MountS3User,
			ProtectSystem:  cfg.ProtectSystem,
			CacheDir:       cfg.SystemdCacheDir,
			StartTimeout:   cfg.MountTimeout,
			MaxCacheMiB:    cfg.SystemdMaxCacheMiB,
			CallTimeout:    cfg.SystemdTimeout,
			Health:         health,
		})
		if err != nil {
			return err
		}
		defer sm.Close()
		if err := sm.ConfigureSlice(ctx, cfg.SystemdSliceCap); err != nil {
			// Mounts still work; they are not capped together until the next start.
			klog.ErrorS(err, "The node-wide cap of the mount-s3 units is not set", "slice", systemd.Slice)
		}
		if err := checkBinaries(ctx, sm); err != nil {
			return err
		}
		monitor.Watch(mountmode.Systemd, sm)
		if cfg.HealthCheckInterval > 0 {
			sm.WatchUnits(monitor.Trigger)
		}
	}

	// One core client for the Node watch, Events, pod restarts and the startup taint (the
	// Secret scope's PV reads have a client of their own, with its own rate limit).
	var core typedcorev1.CoreV1Interface
	if cfg.Kube != nil {
		c, err := typedcorev1.NewForConfig(cfg.Kube)
		if err != nil {
			return err
		}
		core = c
	}
	mode := func() mountmode.Mode { return cfg.DefaultMode }
	labelInvalid := func() bool { return false }
	var pm *pod.Mounter
	if core == nil {
		unavailable[mountmode.Pod] = "the node plugin has no Kubernetes API access (in-cluster or --kubeconfig)"
	} else {
		w, err := startModeWatcher(ctx, cfg, core)
		if err != nil {
			klog.ErrorS(err, "This node's mount mode label is not known yet; using the default until it is", "default", cfg.DefaultMode)
		}
		if w != nil {
			mode, labelInvalid = w.Mode, w.LabelInvalid
		}
		if cfg.DisablePodMode {
			unavailable[mountmode.Pod] = "pod mode is disabled on this node plugin (--pod-mounter=false: Helm mounter.modesInUse lacks pod)"
		} else if pm, err = startPodMode(ctx, cfg, health, monitor.Trigger, fallbackAfter(cfg, sm != nil)); err != nil {
			klog.ErrorS(err, "Pod mode is unavailable on this node; systemd mode still works")
			unavailable[mountmode.Pod] = err.Error()
		}
	}
	// Typed nils must not reach the router as non-nil interfaces.
	var systemdMounter, podMounter mounter.Mounter
	if sm != nil {
		systemdMounter = sm
	}
	if pm != nil {
		podMounter = pm
		monitor.Watch(mountmode.Pod, pm)
	}
	router := mounter.NewRouter(systemdMounter, podMounter, unavailable, mode, filepath.Join(cfg.KubeletPath, "plugins", version.DriverName, "mnt"))
	klog.InfoS("Node plugin ready", "node", cfg.NodeID, "mode", router.Mode(), "podMode", pm != nil)

	scope, err := secretScope(cfg)
	if err != nil {
		return err
	}
	ns, err := driver.NewNodeServer(driver.NodeConfig{
		NodeID:            cfg.NodeID,
		MaxVolumesPerNode: cfg.MaxVolumesPerNode,
		KubeletPath:       cfg.KubeletPath,
		S3EndpointURL:     cfg.S3EndpointURL,
		S3Region:          cfg.S3Region,
		DriverCredentials: cfg.DriverCredentials,
		CABundle:          cfg.CABundle,
		Health:            health,
		Locks:             locks,
		Published:         monitor.Targets,
		Observer:          monitor,
		SecretScope:       scope,
		MountResources:    cfg.MountResources,
		Proxy:             cfg.Proxy,
	}, router)
	if err != nil {
		return err
	}
	srv, err := driver.NewServer(cfg.Endpoint)
	if err != nil {
		return err
	}
	ready := &readiness{router: router, systemd: sm, pod: pm, podDisabled: cfg.DisablePodMode}
	srv.RegisterIdentity(driver.NewIdentityServer(false, ready))
	srv.RegisterNode(ns)
	if cfg.MetricsAddress != "" {
		collectors := monitor.Collectors()
		if sm != nil {
			collectors = append(collectors, sm.Collectors()...)
		}
		if err := serveMetrics(ctx, cfg, &mountCollector{router: router, podsDir: filepath.Join(cfg.KubeletPath, "pods"), labelInvalid: labelInvalid}, collectors...); err != nil {
			return err
		}
	}
	if core != nil {
		recorder, stopEvents := newEventRecorder(core, cfg.NodeID)
		defer stopEvents()
		monitor.SetRecorder(recorder)
		router.SetFallbackReport(func(t mounter.Target, why error) {
			recorder.Event(t, true, ReasonSystemdFallback, fmt.Sprintf("PersistentVolume %s is mounted through systemd mode: %s. It stays in systemd mode until this pod is recreated.",
				t.PVName, safetext.Escape(why.Error())))
		})
		if cfg.RestartPods {
			monitor.SetRestarter(podrestart.New(core, cfg.NodeID))
		}
	}
	if cfg.HealthCheckInterval > 0 {
		go monitor.Run(ctx)
	}
	// A burst of publishes or unpublishes grows the heap; give it back once it sits unused.
	go memreturn.Run(ctx, 10*time.Second, 4<<20)
	if cfg.HealthAddress != "" {
		if err := serveHealth(ctx, cfg.HealthAddress, ready); err != nil {
			return err
		}
	}
	var registering sync.WaitGroup
	if cfg.RegistrationEndpoint != "" {
		reg, err := registration.New(registration.Config{
			Dir:        filepath.Join(cfg.KubeletPath, "plugins_registry"),
			DriverName: version.DriverName,
			Endpoint:   cfg.RegistrationEndpoint,
		})
		if err != nil {
			return err
		}
		// Offered once the CSI socket listens (kubelet calls it right after registering).
		srv.OnListen(func() {
			registering.Add(1)
			go func() {
				defer registering.Done()
				if err := reg.Serve(ctx); err != nil {
					klog.ErrorS(err, "Kubelet plugin registration stopped")
				}
			}()
		})
	}
	if core != nil {
		go removeStartupTaint(ctx, cfg, core)
	}
	err = srv.Run(ctx)
	// The registration socket goes before the process does: kubelet deregisters the driver
	// only when the socket file disappears, so one left behind keeps the driver listed on the
	// node after an uninstall (seen in the cluster suite: the process exited first).
	waitAtMost(&registering, 5*time.Second)
	return err
}

// binaryFlags are the flags that name each program the mount units run, and what to do when
// it is missing.
var binaryFlags = map[string]struct{ flag, fix string }{
	systemd.BinaryMountS3: {"--mount-s3-path",
		"install-mp copies it to the host (Helm node.mountS3InstallDir); set --mount-s3-path to where it is, or --systemd-mounter=false if no node uses systemd mode"},
	systemd.BinaryFuseHelper: {"--fuse-helper-path",
		"install-mp copies it next to mount-s3 (Helm node.mountS3InstallDir; auto: next to --mount-s3-path); set --fuse-helper-path to where it is, or to empty to let mount-s3 mount FUSE itself (holding CAP_SYS_ADMIN), or --systemd-mounter=false if no node uses systemd mode"},
}

// binaryChecker is the part of the systemd mounter checkBinaries uses.
type binaryChecker interface {
	CheckBinaries(ctx context.Context) error
}

// checkBinaryTimeout bounds the start-up check of the mount units' programs.
const checkBinaryTimeout = 2 * time.Minute

// checkBinaries returns an error naming the program and its flag when a program the mount
// units will run is missing or does not run on the host (the plugin then stops: every systemd
// publish would fail). The paths are the host's, which the plugin's container does not see:
// systemd runs each (systemd.Mounter.CheckBinaries). A check that cannot be made (systemd
// unreachable now) is logged and the plugin starts: its Probe reports systemd, and a unit that
// cannot run its program still fails its publish.
func checkBinaries(ctx context.Context, c binaryChecker) error {
	cctx, cancel := context.WithTimeout(ctx, checkBinaryTimeout)
	defer cancel()
	err := c.CheckBinaries(cctx)
	var b *systemd.BinaryError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &b):
		f := binaryFlags[b.Binary]
		return fmt.Errorf("systemd mode cannot mount: %w; %s names it: %s", err, f.flag, f.fix)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		klog.ErrorS(err, "Could not check that mount-s3 and scality-fuse-helper run on the host; starting without the check")
		return nil
	}
}

// waitAtMost waits for wg, at most d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		klog.InfoS("Shutdown went on without waiting for the end of kubelet registration", "waited", d)
	}
}

func startModeWatcher(ctx context.Context, cfg Config, core typedcorev1.CoreV1Interface) (*nodemode.Watcher, error) {
	w := nodemode.New(core, cfg.NodeID, cfg.DefaultMode)
	sctx, cancel := context.WithTimeout(ctx, cfg.APITimeout)
	defer cancel()
	errCh := make(chan error, 1)
	go func() { errCh <- w.Start(ctx) }()
	select {
	case err := <-errCh:
		if err != nil {
			return nil, err
		}
		return w, nil
	case <-sctx.Done():
		// The watcher keeps trying; it reports the default until it reads the Node.
		return w, fmt.Errorf("node %s not read within %v", cfg.NodeID, cfg.APITimeout)
	}
}

// fallbackAfter is the bound after which a pod-mode publish falls back to systemd mode: 0 when
// the fallback is off or systemd mode does not work on this node.
func fallbackAfter(cfg Config, systemdWorks bool) time.Duration {
	if cfg.SystemdFallbackAfter <= 0 {
		return 0
	}
	if !systemdWorks {
		klog.InfoS("The fallback to systemd mode is on but systemd mode does not work on this node: unschedulable Mountpoint Pods are waited for", "systemdFallbackAfter", cfg.SystemdFallbackAfter)
		return 0
	}
	return cfg.SystemdFallbackAfter
}

// startPodMode starts pod mode; a positive fallbackAfter ends a publish waiting for an
// unschedulable Mountpoint Pod after that long with mounter.ErrUnplaceable.
func startPodMode(ctx context.Context, cfg Config, health *mounthealth.Checker, changed func(), fallbackAfter time.Duration) (*pod.Mounter, error) {
	sctx, cancel := context.WithTimeout(ctx, cfg.APITimeout)
	defer cancel()
	cluster, err := pod.NewCluster(sctx, cfg.Kube, cfg.NodeID, cfg.MountpointNamespace, cfg.AttachmentWait, fallbackAfter)
	if err != nil {
		return nil, err
	}
	pm, err := pod.New(pod.Config{KubeletPath: cfg.KubeletPath, Health: health}, cluster)
	if err != nil {
		return nil, err
	}
	// A Mountpoint Pod that changed (its container restarted after mount-s3 died, it was
	// deleted) may have left dead mounts: check at once.
	cluster.OnMountpointPod(func(string, *corev1.Pod) { changed() })
	// A mount-s3 that exits says so in its comm directory (mount.err) before its pod's status
	// changes: watch for that too.
	exits, err := pod.NewExitWatch(cfg.KubeletPath, changed)
	if err != nil {
		return nil, fmt.Errorf("watch the Mountpoint Pods' comm directories: %w", err)
	}
	cluster.OnMountpointPod(exits.Observe)
	unmounter := pod.NewUnmounter(pm, cfg.PodSweepInterval)
	// The informers live as long as ctx, unless start-up fails: then they are stopped rather
	// than left retrying (and logging) for a pod mode nobody will use.
	ictx, stop := context.WithCancel(ctx)
	go exits.Run(ictx)
	started := make(chan error, 1)
	go func() { started <- cluster.Start(ictx) }()
	select {
	case err := <-started:
		if err != nil {
			stop()
			return nil, err
		}
	case <-sctx.Done():
		stop()
		return nil, fmt.Errorf("pod-mode informers did not sync within %v (RBAC for MountpointS3PodAttachments and pods in %s?)", cfg.APITimeout, cfg.MountpointNamespace)
	}
	context.AfterFunc(ctx, stop)
	go unmounter.Run(ctx)
	return pm, nil
}

// removeStartupTaint lifts the node's startup taint once kubelet registered the plugin.
func removeStartupTaint(ctx context.Context, cfg Config, core typedcorev1.CoreV1Interface) {
	cs, err := newTaintClient(core, cfg.Kube)
	if err == nil {
		err = nodemode.RemoveStartupTaint(ctx, cs, cfg.NodeID, 10*time.Minute)
	}
	if err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "Startup taint")
	}
}

// readiness answers Probe for the node's current mode. A mode that failed to start makes the
// plugin not ready (a restart retries it); a mode switched off by flag (--pod-mounter=false,
// --systemd-mounter=false) does not: restarting cannot change a flag, so such a node stays
// ready for the mounts of its other mode and refuses publishes in the disabled one with
// Unavailable instead.
type readiness struct {
	router      *mounter.Router
	systemd     *systemd.Mounter
	pod         *pod.Mounter
	podDisabled bool
}

func (r *readiness) Check(ctx context.Context) error {
	if r.router.Mode() == mountmode.Pod {
		switch {
		case r.podDisabled:
			return nil
		case r.pod == nil:
			return errors.New("the node is in pod mode but pod mode is unavailable")
		}
		return r.pod.Check(ctx)
	}
	if r.systemd == nil {
		return nil // switched off by flag
	}
	return r.systemd.Check(ctx)
}

var (
	descMounts = prometheus.NewDesc("s3csi_node_mounts", "Live S3 volume mounts on this node by the mode that made them (legacy: the Scality driver 1.x's, adopted).", []string{"mode"}, nil)
	descMode   = prometheus.NewDesc("s3csi_node_mount_mode", "1 for the mode new mounts on this node use (its label, else the cluster default).", []string{"mode"}, nil)
	descAvail  = prometheus.NewDesc("s3csi_node_mount_mode_available", "1 when this node plugin can mount in the mode (0: every mount in it fails; see the node plugin's log for why).", []string{"mode"}, nil)
	descLabel  = prometheus.NewDesc("s3csi_node_mount_mode_label_invalid", "1 when the Node's s3.csi.scality.com/mounter label is not a mode (the cluster default applies).", nil, nil)
)

// mountCollector reports the mount table and the node's modes at scrape time.
type mountCollector struct {
	router       *mounter.Router
	podsDir      string
	labelInvalid func() bool
}

func (c *mountCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMounts
	ch <- descMode
	ch <- descAvail
	ch <- descLabel
}

func (c *mountCollector) Collect(ch chan<- prometheus.Metric) {
	if counts, err := c.router.Counts(c.podsDir); err == nil {
		for m, n := range counts {
			ch <- prometheus.MustNewConstMetric(descMounts, prometheus.GaugeValue, float64(n), string(m))
		}
	}
	current := c.router.Mode()
	for _, m := range []mountmode.Mode{mountmode.Systemd, mountmode.Pod} {
		v := 0.0
		if m == current {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descMode, prometheus.GaugeValue, v, string(m))
		avail := 0.0
		if c.router.Available(m) {
			avail = 1
		}
		ch <- prometheus.MustNewConstMetric(descAvail, prometheus.GaugeValue, avail, string(m))
	}
	invalid := 0.0
	if c.labelInvalid != nil && c.labelInvalid() {
		invalid = 1
	}
	ch <- prometheus.MustNewConstMetric(descLabel, prometheus.GaugeValue, invalid)
}

// serveHealth answers GET /healthz with the plugin's Probe (200 "ok", or 500 and the reason),
// each check bounded to a few seconds, as the livenessprobe sidecar would.
func serveHealth(ctx context.Context, address string, ready *readiness) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := ready.Check(cctx); err != nil {
			klog.V(2).InfoS("Health check failed", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return serveHTTP(ctx, "health", address, mux)
}

// serveHTTP serves mux on address until ctx ends.
func serveHTTP(ctx context.Context, what, address string, mux *http.ServeMux) error {
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("%s listener: %w", what, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "HTTP server stopped", "server", what)
		}
	}()
	klog.InfoS("Serving "+what, "address", lis.Addr().String())
	return nil
}

// serveMetrics serves the node plugin's metrics, each labelled node=<the node's name>, so that
// per-node questions (which nodes still carry systemd mounts?) need no relabelling in the
// scrape configuration, and two node plugins' series never merge.
func serveMetrics(ctx context.Context, cfg Config, mounts *mountCollector, more ...prometheus.Collector) error {
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"node": cfg.NodeID}, reg)
	if err := labelled.Register(mounts); err != nil {
		return err
	}
	for _, c := range more {
		if err := labelled.Register(c); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return serveHTTP(ctx, "metrics", cfg.MetricsAddress, mux)
}

// secretScope returns the node-publish Secret check cfg asks for: none for secretscope.Any;
// for Claim, PV reads through their own client (its rate limit above client-go's default of 5
// per second: a node reboot publishes every volume at once), or a refusal of every such
// publish without API access.
func secretScope(cfg Config) (driver.SecretScope, error) {
	switch {
	case cfg.SecretScope == secretscope.Any:
		return nil, nil
	case cfg.Kube == nil:
		klog.InfoS("No Kubernetes API access: publishes with a node-publish secret are refused (their namespace cannot be checked)", "flag", "--node-publish-secret-scope="+secretscope.Any)
		return secretscope.NoAPI{}, nil
	}
	kube := rest.CopyConfig(cfg.Kube)
	kube.QPS, kube.Burst = 50, 100
	cs, err := typedcorev1.NewForConfig(kube)
	if err != nil {
		return nil, err
	}
	return secretscope.New(cs), nil
}

// taintClient is the API the startup taint's removal uses: typed clients of the two groups it
// reads, not a kubernetes.Clientset, whose every group's client the binary would link.
type taintClient struct {
	core    typedcorev1.CoreV1Interface
	storage typedstoragev1.StorageV1Interface
}

func (c taintClient) CoreV1() typedcorev1.CoreV1Interface          { return c.core }
func (c taintClient) StorageV1() typedstoragev1.StorageV1Interface { return c.storage }

func newTaintClient(core typedcorev1.CoreV1Interface, kube *rest.Config) (taintClient, error) {
	storage, err := typedstoragev1.NewForConfig(kube)
	return taintClient{core: core, storage: storage}, err
}
