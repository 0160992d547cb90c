package pod

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Files in a Mountpoint Pod's comm directory (an emptyDir the pod sees at /comm).
const (
	commSocket      = mountoptions.SocketName
	commError       = mountoptions.ErrorFileName
	commExit        = mountoptions.ExitFileName
	commCredentials = mountoptions.CredentialsDirName
	// podCommDir is where the Mountpoint Pod sees its comm directory.
	podCommDir = podcontract.CommMountPath
	// mountpointGID is the group the Mountpoint Pod runs as; credential files are readable by it.
	mountpointGID = podcontract.MountpointUID
)

// paths derives the host paths of pod mode from the kubelet directory.
type paths struct{ kubelet string }

// sourceRoot holds one directory per Mountpoint Pod: the shared FUSE mount.
func (p paths) sourceRoot() string {
	return filepath.Join(p.kubelet, "plugins", version.DriverName, "mnt")
}

// records holds what pod mode remembers about its mounts (root only, unlike the comm
// directories the Mountpoint Pods can write): one file per shared mount and per target.
func (p paths) records() string {
	return filepath.Join(p.kubelet, "plugins", version.DriverName, "pod")
}

// sourceRecord is the record of Mountpoint Pod mpPod's shared mount.
func (p paths) sourceRecord(mpPod string) string {
	return filepath.Join(p.records(), "mp-"+mpPod+".json")
}

// targetRecords holds one record per published target.
func (p paths) targetRecords() string { return filepath.Join(p.records(), "targets") }

// targetRecord is the record of a published target, named by a hash of its path.
func (p paths) targetRecord(target string) string {
	sum := sha256.Sum256([]byte(target))
	return filepath.Join(p.targetRecords(), hex.EncodeToString(sum[:8])+".json")
}

// pods is kubelet's pods directory: workload targets are below it.
func (p paths) pods() string { return filepath.Join(p.kubelet, "pods") }

// source is the shared FUSE mount served by Mountpoint Pod mpPod.
func (p paths) source(mpPod string) string { return filepath.Join(p.sourceRoot(), mpPod) }

// comm is the host path of a Mountpoint Pod's comm emptyDir.
func (p paths) comm(podUID types.UID) string {
	return podcontract.CommHostPath(p.kubelet, podUID)
}

// diagnoseTimeout bounds the API read that explains a failed wait.
const diagnoseTimeout = 5 * time.Second

// sourceRecord is what a shared mount was handed over with (no secret: the credentials are
// files in the comm directory), so that it can be handed over again without kubelet.
type sourceRecord struct {
	Bucket   string   `json:"bucket"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	ReadOnly bool     `json:"readOnly"`
}

// targetRecord is what a target was published with.
type targetRecord struct {
	Target            string `json:"target"`
	MountpointPod     string `json:"mountpointPod"`
	VolumeID          string `json:"volumeID"`
	ReadOnly          bool   `json:"readOnly"`
	WorkloadPodUID    string `json:"workloadPodUID"`
	WorkloadPodName   string `json:"workloadPodName,omitempty"`
	WorkloadNamespace string `json:"workloadNamespace,omitempty"`
	PVName            string `json:"pvName,omitempty"`
	Recovery          string `json:"recovery,omitempty"`
}

func readTargetRecord(path string) (targetRecord, error) {
	var r targetRecord
	err := readJSON(path, &r)
	return r, err
}

// writeJSON writes v to path atomically (a temporary file renamed over it), creating the
// directory; the files are root's alone.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// readJSON reads a record written by writeJSON (at most 64 KiB).
func readJSON(path string, v any) error {
	f, err := os.Open(path) //nolint:gosec // G304: a record in the driver's own root-only directory
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
