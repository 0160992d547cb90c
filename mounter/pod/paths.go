package pod

import (
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Files in a Mountpoint Pod's comm directory (an emptyDir the pod sees at /comm).
const (
	commSocket      = mountoptions.SocketName
	commError       = mountoptions.ErrorFileName
	commExit        = mountoptions.ExitFileName
	commCredentials = mountoptions.CredentialsDirName
	// podCommDir is where the Mountpoint Pod sees its comm directory.
	podCommDir = "/comm"
	// mountpointGID is the group the Mountpoint Pod runs as; credential files are readable by it.
	mountpointGID = 1000
)

// paths derives the host paths of pod mode from the kubelet directory.
type paths struct{ kubelet string }

// sourceRoot holds one directory per Mountpoint Pod: the shared FUSE mount.
func (p paths) sourceRoot() string {
	return filepath.Join(p.kubelet, "plugins", version.DriverName, "mnt")
}

// pods is kubelet's pods directory: workload targets are below it.
func (p paths) pods() string { return filepath.Join(p.kubelet, "pods") }

// source is the shared FUSE mount served by Mountpoint Pod mpPod.
func (p paths) source(mpPod string) string { return filepath.Join(p.sourceRoot(), mpPod) }

// comm is the host path of a Mountpoint Pod's comm emptyDir.
func (p paths) comm(podUID types.UID) string {
	return filepath.Join(p.kubelet, "pods", string(podUID), "volumes", "kubernetes.io~empty-dir", "comm")
}

// diagnoseTimeout bounds the API read that explains a failed wait.
const diagnoseTimeout = 5 * time.Second
