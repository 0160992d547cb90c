// Package version holds the driver's build version, stamped at link time with
//
//	-ldflags "-X github.com/s3csi/s3-csi-driver/pkg/version.Version=v1.2.3"
//
// and the driver's CSI name, which is an interface fact shared by every component.
package version

// DriverName is the CSI driver name registered with kubelet; labels, annotations, the CRD group
// and the plugin directory all derive from it.
const DriverName = "s3.csi.scality.com"

// Version is the driver version. It is "dev" in builds that were not stamped by make.
var Version = "dev"
