// Package reconcileroptions owns the flags of the scality-csi-controller binary (the Pod
// Reconciler): their definitions (AddFlags) and their validation into the reconciler's
// configuration (Config). main parses and runs; tests/helm calls Parse on the arguments the
// Helm chart renders, so that a value the chart accepts is one the binary accepts.
package reconcileroptions

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/klogflags"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Options are the parsed flags of scality-csi-controller.
type Options struct {
	Namespace          string
	Image              string
	PullPolicy         string
	Command            string
	PriorityClass      string
	Tolerations        string
	ServiceAccount     string
	PullSecrets        string
	Labels             string
	SecurityContext    string
	Annotations        string
	CacheSizeLimit     string
	CpuRequest         string
	CpuLimit           string
	MemoryRequest      string
	MemoryLimit        string
	BatchWindow        time.Duration
	PprofAddress       string
	ResyncInterval     time.Duration
	OrphanGrace        time.Duration
	Workers            int
	DrainWorkers       int
	GcPercent          int
	LeaderElect        bool
	LeaderElectionNS   string
	LeaderElectionID   string
	MetricsAddress     string
	HealthProbeAddress string
	DefaultMounter     string
	ShowVersion        bool
}

// AddFlags defines every flag on fs, bound to o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Namespace, "mountpoint-namespace", "mount-s3", "namespace of the Mountpoint Pods")
	fs.StringVar(&o.Image, "mountpoint-image", "", "image of the Mountpoint Pods (the driver image); required")
	fs.StringVar(&o.PullPolicy, "mountpoint-image-pull-policy", "IfNotPresent", "image pull policy of the Mountpoint Pods: Always, IfNotPresent or Never")
	fs.StringVar(&o.Command, "mountpoint-command", "/bin/scality-csi-mounter", "command the Mountpoint Pod runs")
	fs.StringVar(&o.PriorityClass, "mountpoint-priority-class-name", "", "priority class of the Mountpoint Pods (none when empty)")
	fs.StringVar(&o.Tolerations, "mountpoint-tolerations", "", `tolerations of the Mountpoint Pods as a JSON list, e.g. [{"key":"dedicated","operator":"Exists"}] (none when empty)`)
	fs.StringVar(&o.ServiceAccount, "mountpoint-service-account", "", "service account of the Mountpoint Pods (the namespace default when empty; its token is never mounted)")
	fs.StringVar(&o.PullSecrets, "mountpoint-image-pull-secrets", "", "comma-separated names of Secrets in the Mountpoint Pod namespace used to pull the Mountpoint Pods' image (none when empty)")
	fs.StringVar(&o.SecurityContext, "mountpoint-security-context", "", `added to every Mountpoint Pod's security context, as JSON, e.g. {"seccompProfile":{"type":"Localhost","localhostProfile":"profiles/mount-s3.json"}}: seLinuxOptions (type and level), seccompProfile, appArmorProfile, supplementalGroups, within the restricted Pod Security level; the user, group and fsGroup are the driver's (none when empty)`)
	fs.StringVar(&o.Labels, "mountpoint-labels", "", `labels added to every Mountpoint Pod as a JSON object, e.g. {"team":"storage"} (none when empty); the driver's own keys (s3.csi.scality.com/*, app.kubernetes.io/component) are refused`)
	fs.StringVar(&o.Annotations, "mountpoint-annotations", "", `annotations added to every Mountpoint Pod as a JSON object, e.g. {"sidecar.istio.io/inject":"false"} (none when empty); the driver's own keys (s3.csi.scality.com/*) are refused`)
	fs.StringVar(&o.CacheSizeLimit, "mountpoint-cache-size-limit", "", "size limit of a Mountpoint Pod's /tmp volume, where mount-s3 keeps a volume's cache (the cache mount option), a Kubernetes quantity of at least 128Mi; mount-s3's --max-cache-size is kept below it (none when empty: the cache is bounded only by mount-s3's own default)")
	fs.StringVar(&o.CpuRequest, "mountpoint-cpu-request", "", "CPU request of a Mountpoint Pod's container, a Kubernetes quantity such as 50m (none when empty); a volume's mountpointCPURequest attribute overrides it")
	fs.StringVar(&o.CpuLimit, "mountpoint-cpu-limit", "", "CPU limit of a Mountpoint Pod's container (none when empty); a volume's mountpointCPULimit attribute overrides it")
	fs.StringVar(&o.MemoryRequest, "mountpoint-memory-request", "", "memory request of a Mountpoint Pod's container, a Kubernetes quantity such as 128Mi (none when empty); a volume's mountpointMemoryRequest attribute overrides it")
	fs.StringVar(&o.MemoryLimit, "mountpoint-memory-limit", "", "memory limit of a Mountpoint Pod's container (none when empty): mount-s3 is OOM-killed above it and the node repairs the mount; a volume's mountpointMemoryLimit attribute overrides it")
	fs.DurationVar(&o.BatchWindow, "batch-window", time.Second, "events for a volume on a node reconciled less than this long ago wait for the rest of the window (or the end of the burst), so a burst of workloads costs one write")
	fs.DurationVar(&o.ResyncInterval, "resync-interval", 2*time.Minute, "how often every attachment and Mountpoint Pod is checked again (stale-attachment cleaner)")
	fs.DurationVar(&o.OrphanGrace, "orphan-grace", time.Minute, "age at which a Mountpoint Pod no attachment references is retired")
	fs.IntVar(&o.Workers, "workers", 4, "concurrent reconciles while workload events keep arriving: keys wait in the queue, where one write covers every workload that arrived meanwhile")
	fs.IntVar(&o.DrainWorkers, "drain-workers", 16, "concurrent reconciles once workload events have stopped for a quarter of a second: what a burst left in the queue is written at this concurrency (at least --workers)")
	fs.IntVar(&o.GcPercent, "gc-percent", 75, "Go's garbage collection target (GOGC, Go's own default 100): the heap may grow this many percent over what is live before a collection; lower keeps the memory of a large pod cache down at some CPU")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader (Lease) so only one replica reconciles")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election Lease (default $POD_NAMESPACE; in-cluster default otherwise)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "scality-csi-controller", "name of the leader election Lease")
	fs.StringVar(&o.MetricsAddress, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	fs.StringVar(&o.PprofAddress, "pprof-address", "", "address serving Go's profiles (/debug/pprof/), for measuring the controller, e.g. 127.0.0.1:8082 (none when empty, the default)")
	fs.StringVar(&o.HealthProbeAddress, "health-probe-address", ":8081", "address of /healthz and /readyz (0 disables them)")
	fs.StringVar(&o.DefaultMounter, "default-mounter", string(mountmode.Default), "cluster default mount mode (systemd or pod); a node's s3.csi.scality.com/mounter label overrides it. Mountpoint Pods are created only for workloads on pod-mode nodes")
	fs.BoolVar(&o.ShowVersion, "version", false, "print the version and exit")
}

// Config validates the parsed flags, as main does before it starts anything, and returns the
// Pod Reconciler's configuration with every problem found (joined), each naming its flag.
func (o *Options) Config() (reconciler.Config, error) {
	var errs []error
	if o.Image == "" {
		errs = append(errs, errors.New("--mountpoint-image is required"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--mountpoint-namespace must not be empty"))
	}
	policy := corev1.PullPolicy(o.PullPolicy)
	if policy != corev1.PullAlways && policy != corev1.PullIfNotPresent && policy != corev1.PullNever {
		errs = append(errs, fmt.Errorf("--mountpoint-image-pull-policy must be Always, IfNotPresent or Never, not %q", o.PullPolicy))
	}
	var tolerations []corev1.Toleration
	if o.Tolerations != "" {
		dec := json.NewDecoder(strings.NewReader(o.Tolerations))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tolerations); err != nil {
			errs = append(errs, fmt.Errorf("--mountpoint-tolerations: %w", err))
		}
	}
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range strings.Split(o.PullSecrets, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--mountpoint-image-pull-secrets: %q is not a Secret name: %s", name, strings.Join(msgs, "; ")))
			continue
		}
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	labels, err := podcontract.ParseExtraMetadata("--mountpoint-labels", o.Labels, true)
	if err != nil {
		errs = append(errs, err)
	}
	annotations, err := podcontract.ParseExtraMetadata("--mountpoint-annotations", o.Annotations, false)
	if err != nil {
		errs = append(errs, err)
	}
	securityContext, err := podcontract.ParseSecurityContext("--mountpoint-security-context", o.SecurityContext)
	if err != nil {
		errs = append(errs, err)
	}
	res, err := mountresources.FromFlags(map[string]string{
		mountresources.AttrCPURequest: o.CpuRequest, mountresources.AttrCPULimit: o.CpuLimit,
		mountresources.AttrMemoryRequest: o.MemoryRequest, mountresources.AttrMemoryLimit: o.MemoryLimit,
	})
	if err != nil {
		errs = append(errs, err)
	}
	cacheLimit, _, err := mountresources.ParseCacheLimit("--mountpoint-cache-size-limit", o.CacheSizeLimit)
	if err != nil {
		errs = append(errs, err)
	}
	defaultMode, err := mountmode.Parse(o.DefaultMounter)
	if err != nil {
		errs = append(errs, fmt.Errorf("--default-mounter: %w", err))
	}
	if o.BatchWindow < 0 || o.ResyncInterval <= 0 || o.OrphanGrace <= 0 || o.Workers < 1 || o.DrainWorkers < 1 {
		errs = append(errs, errors.New("--batch-window must be >= 0; --resync-interval, --orphan-grace, --workers and --drain-workers must be positive"))
	}
	if o.GcPercent < 10 || o.GcPercent > 1000 {
		errs = append(errs, fmt.Errorf("--gc-percent must be between 10 and 1000, not %d (100 is Go's default)", o.GcPercent))
	}
	return reconciler.Config{
		MountpointPod: reconciler.MountpointPodConfig{
			Namespace: o.Namespace, Image: o.Image, Command: []string{o.Command}, ImagePullPolicy: policy,
			PriorityClassName: o.PriorityClass, Tolerations: tolerations, ServiceAccountName: o.ServiceAccount,
			ImagePullSecrets: pullSecrets, DriverVersion: version.Version, Resources: res,
			Labels: labels, Annotations: annotations, CacheSizeLimit: cacheLimit, SecurityContext: securityContext,
		},
		BatchWindow: o.BatchWindow,
		OrphanGrace: o.OrphanGrace,
		DefaultMode: defaultMode,
	}, errors.Join(errs...)
}

// Parse parses args (the binary's arguments, without its name) with the flags of AddFlags and
// validates them (Config): the start-up checks of main, short of connecting. Flags of klog (-v
// and the like) are checked as main checks them and change nothing (klogflags): safe for
// concurrent use.
func Parse(args []string) (*Options, reconciler.Config, error) {
	fs := flag.NewFlagSet("scality-csi-controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	klogflags.AddChecked(fs)
	o := &Options{}
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, reconciler.Config{}, err
	}
	cfg, err := o.Config()
	return o, cfg, err
}
