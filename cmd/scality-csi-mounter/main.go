// Command scality-csi-mounter runs in each Mountpoint Pod (pod mount mode): it receives a FUSE
// file descriptor and mount options from the node plugin over <comm>/mount.sock and serves the
// bucket with mount-s3 in the foreground until the node unmounts it. See pkg/mountpointpod for
// the contract. Flags are the only configuration.
//
// With --hold it only waits for SIGTERM (the headroom pods, docs/adr/0011).
//
// Exit status: 0 when the pod should end Succeeded (unmounted on request, retired before
// mounting, or terminated while waiting), 1 when it should be restarted (mount-s3 failed; its
// error is in <comm>/mount.err), 2 for invalid flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/mountpointpod"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

func main() {
	// Catch termination signals first: the default action would kill a serving mount.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	c := mountpointpod.Config{Signals: sigs}
	fs.StringVar(&c.CommDir, "comm-dir", "/comm", "directory shared with the node plugin (mount.sock, mount.err, mount.exit, credentials/)")
	fs.StringVar(&c.MountS3Path, "mount-s3-path", "/mountpoint-s3/bin/mount-s3", "path of the mount-s3 binary in the image")
	fs.Uint64Var(&c.MaxCacheMiB, "max-cache-size-mib", 0, "upper bound of mount-s3's --max-cache-size (MiB) for a mount with a cache; the Pod Reconciler derives it from the pod's cache volume (0: no bound)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	hold := fs.Bool("hold", false, "do nothing until terminated: the container of the headroom pods, which hold room on a node for the Mountpoint Pods that preempt them")
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Printf("scality-csi-mounter %s\n", version.Version)
		return
	}
	if *hold {
		klog.InfoS("Holding room for Mountpoint Pods until terminated", "version", version.Version)
		sig := <-sigs
		klog.InfoS("Terminated", "signal", sig.String())
		klog.Flush()
		return
	}
	if err := c.Validate(); err != nil {
		klog.ErrorS(err, "Invalid flags")
		klog.Flush()
		os.Exit(2)
	}
	klog.InfoS("Starting", "version", version.Version, "commDir", c.CommDir, "mountS3", c.MountS3Path, "uid", os.Getuid(), "gid", os.Getgid())
	if err := mountpointpod.Run(context.Background(), c); err != nil {
		klog.ErrorS(err, "Mounter stopped")
		klog.Flush()
		os.Exit(1)
	}
	klog.InfoS("Done")
	klog.Flush()
}
