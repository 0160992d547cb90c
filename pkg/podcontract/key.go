package podcontract

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// Key is the sharing key: workloads with equal keys share a Mountpoint Pod.
type Key struct {
	NodeName     string
	PVName       string
	VolumeID     string
	MountOptions string
	FSGroup      string
	AuthSource   string
}

// Of2x reports whether the key is that of an attachment Scality's 2.x made: 2.x records no
// authentication source. Such an attachment keeps the workloads 2.x attached until they end and
// never takes a new one (docs/upgrade.md).
func (k Key) Of2x() bool { return k.AuthSource == "" }

// String renders the key unambiguously (fields are length-prefixed).
func (k Key) String() string {
	var b strings.Builder
	for _, f := range []string{k.NodeName, k.PVName, k.VolumeID, k.MountOptions, k.FSGroup, k.AuthSource} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
		b.WriteByte(';')
	}
	return b.String()
}

// KeyOf returns the sharing key an attachment records.
func KeyOf(a *crdv2.MountpointS3PodAttachment) Key {
	return Key{
		NodeName:     a.Spec.NodeName,
		PVName:       a.Spec.PersistentVolumeName,
		VolumeID:     a.Spec.VolumeID,
		MountOptions: a.Spec.MountOptions,
		FSGroup:      a.Spec.WorkloadFSGroup,
		AuthSource:   a.Spec.AuthenticationSource,
	}
}

// AttachmentName is the deterministic name of the attachment for a key. Two controllers that
// reconcile the same key concurrently race on this name, and the API server lets only one win.
func AttachmentName(k Key) string {
	sum := sha256.Sum224([]byte(k.String()))
	return "s3pa-" + hex.EncodeToString(sum[:])
}
