// Command scality-csi-controller runs the pod-mode control plane: the Pod Reconciler, which
// gives every workload that mounts an S3 volume a Mountpoint Pod on its node and records the
// pairing in a MountpointS3PodAttachment, and the periodic stale-attachment cleaner. Flags are
// the only configuration; the Kubernetes connection comes from --kubeconfig, $KUBECONFIG or the
// in-cluster service account.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/reconciler"
	"github.com/s3csi/s3-csi-driver/pkg/reconcileroptions"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

func main() {
	klog.InitFlags(nil)
	var o reconcileroptions.Options
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	if o.ShowVersion {
		fmt.Printf("scality-csi-controller %s\n", version.Version)
		return
	}
	logger := klog.NewKlogr()
	ctrl.SetLogger(logger)
	cfg, err := o.Config()
	if err != nil {
		logger.Error(err, "Invalid flags")
		os.Exit(2)
	}
	if err := run(o, cfg); err != nil {
		logger.Error(err, "Controller stopped")
		os.Exit(1)
	}
}

func run(o reconcileroptions.Options, cfg reconciler.Config) error {
	debug.SetGCPercent(o.GcPercent)
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
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:        o.HealthProbeAddress,
		PprofBindAddress:              o.PprofAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := reconciler.Setup(ctx, mgr, cfg, reconciler.Options{Workers: o.Workers, DrainWorkers: o.DrainWorkers, ResyncInterval: o.ResyncInterval}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("Starting", "version", version.Version, "mountpointNamespace", cfg.MountpointPod.Namespace, "leaderElection", o.LeaderElect)
	return mgr.Start(ctx)
}
