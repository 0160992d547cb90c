// Command scality-csi-controller runs the pod-mode control plane: the Pod Reconciler, which
// gives every workload that mounts an S3 volume a Mountpoint Pod on its node and records the
// pairing in a MountpointS3PodAttachment, and the periodic stale-attachment cleaner. Flags are
// the only configuration; the Kubernetes connection comes from --kubeconfig, $KUBECONFIG or the
// in-cluster service account.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

type options struct {
	namespace          string
	image              string
	pullPolicy         string
	command            string
	priorityClass      string
	tolerations        string
	serviceAccount     string
	pullSecrets        string
	labels             string
	securityContext    string
	annotations        string
	cacheSizeLimit     string
	cpuRequest         string
	cpuLimit           string
	memoryRequest      string
	memoryLimit        string
	batchWindow        time.Duration
	pprofAddress       string
	resyncInterval     time.Duration
	orphanGrace        time.Duration
	workers            int
	drainWorkers       int
	gcPercent          int
	leaderElect        bool
	leaderElectionNS   string
	leaderElectionID   string
	metricsAddress     string
	healthProbeAddress string
	defaultMounter     string
	showVersion        bool
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.namespace, "mountpoint-namespace", "mount-s3", "namespace of the Mountpoint Pods")
	fs.StringVar(&o.image, "mountpoint-image", "", "image of the Mountpoint Pods (the driver image); required")
	fs.StringVar(&o.pullPolicy, "mountpoint-image-pull-policy", "IfNotPresent", "image pull policy of the Mountpoint Pods: Always, IfNotPresent or Never")
	fs.StringVar(&o.command, "mountpoint-command", "/bin/scality-csi-mounter", "command the Mountpoint Pod runs")
	fs.StringVar(&o.priorityClass, "mountpoint-priority-class-name", "", "priority class of the Mountpoint Pods (none when empty)")
	fs.StringVar(&o.tolerations, "mountpoint-tolerations", "", `tolerations of the Mountpoint Pods as a JSON list, e.g. [{"key":"dedicated","operator":"Exists"}] (none when empty)`)
	fs.StringVar(&o.serviceAccount, "mountpoint-service-account", "", "service account of the Mountpoint Pods (the namespace default when empty; its token is never mounted)")
	fs.StringVar(&o.pullSecrets, "mountpoint-image-pull-secrets", "", "comma-separated names of Secrets in the Mountpoint Pod namespace used to pull the Mountpoint Pods' image (none when empty)")
	fs.StringVar(&o.securityContext, "mountpoint-security-context", "", `added to every Mountpoint Pod's security context, as JSON, e.g. {"seccompProfile":{"type":"Localhost","localhostProfile":"profiles/mount-s3.json"}}: seLinuxOptions (type and level), seccompProfile, appArmorProfile, supplementalGroups, within the restricted Pod Security level; the user, group and fsGroup are the driver's (none when empty)`)
	fs.StringVar(&o.labels, "mountpoint-labels", "", `labels added to every Mountpoint Pod as a JSON object, e.g. {"team":"storage"} (none when empty); the driver's own keys (s3.csi.scality.com/*, app.kubernetes.io/component) are refused`)
	fs.StringVar(&o.annotations, "mountpoint-annotations", "", `annotations added to every Mountpoint Pod as a JSON object, e.g. {"sidecar.istio.io/inject":"false"} (none when empty); the driver's own keys (s3.csi.scality.com/*) are refused`)
	fs.StringVar(&o.cacheSizeLimit, "mountpoint-cache-size-limit", "", "size limit of a Mountpoint Pod's /tmp volume, where mount-s3 keeps a volume's cache (the cache mount option), a Kubernetes quantity of at least 128Mi; mount-s3's --max-cache-size is kept below it (none when empty: the cache is bounded only by mount-s3's own default)")
	fs.StringVar(&o.cpuRequest, "mountpoint-cpu-request", "", "CPU request of a Mountpoint Pod's container, a Kubernetes quantity such as 50m (none when empty); a volume's mountpointCPURequest attribute overrides it")
	fs.StringVar(&o.cpuLimit, "mountpoint-cpu-limit", "", "CPU limit of a Mountpoint Pod's container (none when empty); a volume's mountpointCPULimit attribute overrides it")
	fs.StringVar(&o.memoryRequest, "mountpoint-memory-request", "", "memory request of a Mountpoint Pod's container, a Kubernetes quantity such as 128Mi (none when empty); a volume's mountpointMemoryRequest attribute overrides it")
	fs.StringVar(&o.memoryLimit, "mountpoint-memory-limit", "", "memory limit of a Mountpoint Pod's container (none when empty): mount-s3 is OOM-killed above it and the node repairs the mount; a volume's mountpointMemoryLimit attribute overrides it")
	fs.DurationVar(&o.batchWindow, "batch-window", time.Second, "events for a volume on a node reconciled less than this long ago wait for the rest of the window (or the end of the burst), so a burst of workloads costs one write")
	fs.DurationVar(&o.resyncInterval, "resync-interval", 2*time.Minute, "how often every attachment and Mountpoint Pod is checked again (stale-attachment cleaner)")
	fs.DurationVar(&o.orphanGrace, "orphan-grace", time.Minute, "age at which a Mountpoint Pod no attachment references is retired")
	fs.IntVar(&o.workers, "workers", 4, "concurrent reconciles while workload events keep arriving: keys wait in the queue, where one write covers every workload that arrived meanwhile")
	fs.IntVar(&o.drainWorkers, "drain-workers", 16, "concurrent reconciles once workload events have stopped for a quarter of a second: what a burst left in the queue is written at this concurrency (at least --workers)")
	fs.IntVar(&o.gcPercent, "gc-percent", 75, "Go's garbage collection target (GOGC, Go's own default 100): the heap may grow this many percent over what is live before a collection; lower keeps the memory of a large pod cache down at some CPU")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader (Lease) so only one replica reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election Lease (default $POD_NAMESPACE; in-cluster default otherwise)")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "scality-csi-controller", "name of the leader election Lease")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	fs.StringVar(&o.pprofAddress, "pprof-address", "", "address serving Go's profiles (/debug/pprof/), for measuring the controller, e.g. 127.0.0.1:8082 (none when empty, the default)")
	fs.StringVar(&o.healthProbeAddress, "health-probe-address", ":8081", "address of /healthz and /readyz (0 disables them)")
	fs.StringVar(&o.defaultMounter, "default-mounter", string(mountmode.Default), "cluster default mount mode (systemd or pod); a node's s3.csi.scality.com/mounter label overrides it. Mountpoint Pods are created only for workloads on pod-mode nodes")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
}

func (o *options) reconcilerConfig() (reconciler.Config, error) {
	var errs []error
	if o.image == "" {
		errs = append(errs, errors.New("--mountpoint-image is required"))
	}
	if o.namespace == "" {
		errs = append(errs, errors.New("--mountpoint-namespace must not be empty"))
	}
	policy := corev1.PullPolicy(o.pullPolicy)
	if policy != corev1.PullAlways && policy != corev1.PullIfNotPresent && policy != corev1.PullNever {
		errs = append(errs, fmt.Errorf("--mountpoint-image-pull-policy must be Always, IfNotPresent or Never, not %q", o.pullPolicy))
	}
	var tolerations []corev1.Toleration
	if o.tolerations != "" {
		dec := json.NewDecoder(strings.NewReader(o.tolerations))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tolerations); err != nil {
			errs = append(errs, fmt.Errorf("--mountpoint-tolerations: %w", err))
		}
	}
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range strings.Split(o.pullSecrets, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--mountpoint-image-pull-secrets: %q is not a Secret name: %s", name, strings.Join(msgs, "; ")))
			continue
		}
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	labels, err := podcontract.ParseExtraMetadata("--mountpoint-labels", o.labels, true)
	if err != nil {
		errs = append(errs, err)
	}
	annotations, err := podcontract.ParseExtraMetadata("--mountpoint-annotations", o.annotations, false)
	if err != nil {
		errs = append(errs, err)
	}
	securityContext, err := podcontract.ParseSecurityContext("--mountpoint-security-context", o.securityContext)
	if err != nil {
		errs = append(errs, err)
	}
	res, err := mountresources.FromFlags(map[string]string{
		mountresources.AttrCPURequest: o.cpuRequest, mountresources.AttrCPULimit: o.cpuLimit,
		mountresources.AttrMemoryRequest: o.memoryRequest, mountresources.AttrMemoryLimit: o.memoryLimit,
	})
	if err != nil {
		errs = append(errs, err)
	}
	cacheLimit, _, err := mountresources.ParseCacheLimit("--mountpoint-cache-size-limit", o.cacheSizeLimit)
	if err != nil {
		errs = append(errs, err)
	}
	defaultMode, err := mountmode.Parse(o.defaultMounter)
	if err != nil {
		errs = append(errs, fmt.Errorf("--default-mounter: %w", err))
	}
	if o.batchWindow < 0 || o.resyncInterval <= 0 || o.orphanGrace <= 0 || o.workers < 1 || o.drainWorkers < 1 {
		errs = append(errs, errors.New("--batch-window must be >= 0; --resync-interval, --orphan-grace, --workers and --drain-workers must be positive"))
	}
	if o.gcPercent < 10 || o.gcPercent > 1000 {
		errs = append(errs, fmt.Errorf("--gc-percent must be between 10 and 1000, not %d (100 is Go's default)", o.gcPercent))
	}
	return reconciler.Config{
		MountpointPod: reconciler.MountpointPodConfig{
			Namespace: o.namespace, Image: o.image, Command: []string{o.command}, ImagePullPolicy: policy,
			PriorityClassName: o.priorityClass, Tolerations: tolerations, ServiceAccountName: o.serviceAccount,
			ImagePullSecrets: pullSecrets, DriverVersion: version.Version, Resources: res,
			Labels: labels, Annotations: annotations, CacheSizeLimit: cacheLimit, SecurityContext: securityContext,
		},
		BatchWindow: o.batchWindow,
		OrphanGrace: o.orphanGrace,
		DefaultMode: defaultMode,
	}, errors.Join(errs...)
}

func main() {
	klog.InitFlags(nil)
	var o options
	o.addFlags(flag.CommandLine)
	flag.Parse()
	if o.showVersion {
		fmt.Printf("scality-csi-controller %s\n", version.Version)
		return
	}
	logger := klog.NewKlogr()
	ctrl.SetLogger(logger)
	cfg, err := o.reconcilerConfig()
	if err != nil {
		logger.Error(err, "Invalid flags")
		os.Exit(2)
	}
	if err := run(o, cfg); err != nil {
		logger.Error(err, "Controller stopped")
		os.Exit(1)
	}
}

func run(o options, cfg reconciler.Config) error {
	debug.SetGCPercent(o.gcPercent)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := crdv2.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes connection: %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         reconciler.CacheOptions(cfg.MountpointPod.Namespace),
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddress},
		HealthProbeBindAddress:        o.healthProbeAddress,
		PprofBindAddress:              o.pprofAddress,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := reconciler.Setup(ctx, mgr, cfg, reconciler.Options{Workers: o.workers, DrainWorkers: o.drainWorkers, ResyncInterval: o.resyncInterval}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("Starting", "version", version.Version, "mountpointNamespace", cfg.MountpointPod.Namespace, "leaderElection", o.leaderElect)
	return mgr.Start(ctx)
}
