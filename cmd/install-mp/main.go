// Command install-mp copies mount-s3 (and the libraries bundled with it) from the driver image
// to the host, atomically, so the systemd mount mode can run it there. It runs as an init
// container of the node DaemonSet.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/installer"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

func main() {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	src := fs.String("source-dir", "/mountpoint-s3/bin", "directory in the image holding mount-s3 and its libraries")
	dst := fs.String("install-dir", "/opt/mountpoint-s3-csi/bin/", "host directory (mounted into this container) to install into")
	showVersion := fs.Bool("version", false, "print the version and exit")
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Printf("install-mp %s\n", version.Version)
		return
	}
	names, err := installer.Install(*src, *dst)
	if err != nil {
		klog.ErrorS(err, "Install failed", "source", *src, "destination", *dst)
		os.Exit(1)
	}
	klog.InfoS("Installed", "files", names, "destination", *dst)
}
