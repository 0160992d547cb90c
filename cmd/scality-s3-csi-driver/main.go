// Command scality-s3-csi-driver is the CSI plugin: Identity + Node services on a node
// (--mode=node), Identity + Controller services in the controller Deployment (--mode=controller,
// dynamic provisioning: a bucket per volume). Flags are the only configuration; a few default to
// the environment (CSI_NODE_NAME, AWS_ENDPOINT_URL, AWS_REGION). Driver-level credentials come
// from the standard AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/driver"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/nodeplugin"
	"github.com/s3csi/s3-csi-driver/pkg/pluginoptions"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

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
	var o pluginoptions.Options
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if o.ShowVersion {
		fmt.Printf("%s %s\n", version.DriverName, version.Version)
		return
	}
	if err := o.Validate(); err != nil {
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

func run(ctx context.Context, o pluginoptions.Options) error {
	creds, err := driverCredentials()
	if err != nil {
		return err
	}
	if o.Mode == "controller" {
		return runController(ctx, o, creds)
	}
	klog.InfoS("Starting", "driver", version.DriverName, "version", version.Version, "mode", o.Mode, "nodeID", o.NodeID, "driverCredentials", creds != nil, "defaultMounter", o.DefaultMounter)
	kube, err := kubeConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	defaultMode, _ := mountmode.Parse(o.DefaultMounter) // validated
	var caBundle []byte
	if o.S3CABundle != "" {
		if caBundle, err = pluginoptions.ReadCABundle(o.S3CABundle); err != nil {
			return err
		}
	}
	return nodeplugin.Run(ctx, nodeplugin.Config{
		Endpoint:              o.Endpoint,
		NodeID:                o.NodeID,
		KubeletPath:           o.KubeletPath,
		MaxVolumesPerNode:     o.MaxVolumesPerNode,
		S3EndpointURL:         o.S3EndpointURL,
		S3Region:              o.S3Region,
		DriverCredentials:     creds,
		CABundle:              caBundle,
		DefaultMode:           defaultMode,
		SystemdSocket:         o.SystemdSocket,
		MountS3Path:           o.MountS3Path,
		FuseHelperPath:        o.FuseHelper(),
		UmountPath:            o.UmountPath,
		MountTimeout:          o.MountTimeout,
		SystemdTimeout:        o.SystemdTimeout,
		Kube:                  kube,
		MountpointNamespace:   o.MountpointNamespace,
		PodSweepInterval:      o.PodSweepInterval,
		APITimeout:            o.ApiTimeout,
		AttachmentWait:        o.AttachmentWait,
		SystemdFallbackAfter:  o.FallbackAfter,
		DisablePodMode:        !o.PodMounter,
		DisableSystemdMode:    !o.SystemdMounter,
		HealthAddress:         o.HealthAddress,
		RegistrationEndpoint:  o.RegistrationPath,
		HealthTimeout:         o.HealthTimeout,
		HealthCheckInterval:   o.HealthInterval,
		HealthProbesPerCheck:  probesPerCheck(o.ProbesPerCheck),
		RestartPods:           o.RestartPods,
		SecretScope:           o.SecretScope,
		SystemdCredentialsDir: o.CredentialsDir,
		MountS3User:           o.MountS3User,
		ProtectSystem:         o.ProtectSystem,
		SystemdCacheDir:       o.CacheDir,
		MountResources:        o.MountResources,
		Proxy:                 o.Proxy,
		SystemdSliceCap:       o.SliceCap,
		SystemdMaxCacheMiB:    o.MaxCacheMiB,
		MountPath:             o.MountPath,
		MetricsAddress:        o.MetricsAddress,
		Profiling:             o.Profiling,
	})
}

// kubeConfig returns the Kubernetes connection of a node plugin: kubeconfig (--kubeconfig), else the
// in-cluster service account when running in a pod, else none (systemd mode only).
func kubeConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
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
func runController(ctx context.Context, o pluginoptions.Options, creds *credentials.Credentials) error {
	klog.InfoS("Starting", "driver", version.DriverName, "version", version.Version, "mode", o.Mode,
		"s3Endpoint", o.S3EndpointURL, "s3Region", o.S3Region, "s3CABundle", o.S3CABundle, "driverCredentials", creds != nil)
	cfg := s3.Config{EndpointURL: o.S3EndpointURL, Region: o.S3Region, Proxy: o.Proxy}
	if o.S3CABundle != "" {
		pem, err := pluginoptions.ReadCABundle(o.S3CABundle)
		if err != nil {
			return err
		}
		cfg.CABundle = pem
	}
	store, err := s3.NewStore(cfg)
	if err != nil {
		return err
	}
	cs, err := driver.NewControllerServer(driver.ControllerConfig{
		DriverCredentials: creds,
		EmptyBudget:       o.EmptyBucketBudget,
		NewClient: func(c credentials.Credentials, region string) driver.BucketClient {
			return store.Client(c, region)
		},
	})
	if err != nil {
		return err
	}
	srv, err := driver.NewServer(o.Endpoint)
	if err != nil {
		return err
	}
	if o.MetricsAddress != "" {
		if err := serveControllerMetrics(ctx, o.MetricsAddress, cs.Collectors()); err != nil {
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
