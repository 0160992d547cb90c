package driver

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// Volume context keys (PV volumeAttributes, plus what kubelet adds with podInfoOnMount).
const (
	ctxBucketName  = "bucketName"
	ctxAuthSource  = "authenticationSource"
	ctxPodUID      = "csi.storage.k8s.io/pod.uid"
	ctxPodNS       = "csi.storage.k8s.io/pod.namespace"
	ctxPodName     = "csi.storage.k8s.io/pod.name"
	ctxRecovery    = "mountRecovery"
	maxVolumeID    = 1024
	maxContextKeys = 64
	maxContextVal  = 64 << 10 // kubelet's serviceAccount.tokens can be large
)

// validateText checks a free-form request string with the project's one string rule
// (safetext.Check): present, within maxLen bytes, valid UTF-8, no control, format or separator
// characters. The message names field, never the value.
func validateText(field, v string, maxLen int) error {
	if err := safetext.Check(v, maxLen); err != nil {
		if errors.Is(err, safetext.ErrEmpty) {
			return invalid(field, "is required")
		}
		return invalid(field, "%v", err)
	}
	return nil
}

// validateBucketName checks a static volume's bucket with S3's naming rules (s3.ValidateBucketName,
// the project's one rule set).
func validateBucketName(field, b string) error {
	if err := validateText(field, b, 63); err != nil {
		return err
	}
	if err := s3.ValidateBucketName(b); err != nil {
		return invalid(field, "%v", err)
	}
	return nil
}

// validateVolumeContext bounds the size of the context; individual keys are checked by their
// users. Unknown keys are allowed (kubelet and the provisioner add their own).
func validateVolumeContext(vc map[string]string) error {
	if len(vc) > maxContextKeys {
		return invalid("volume_context", "has %d keys, at most %d are accepted", len(vc), maxContextKeys)
	}
	for k, v := range vc {
		if err := validateText("volume_context key", k, 253); err != nil {
			return err
		}
		if len(v) > maxContextVal || !utf8.ValidString(v) {
			return invalid("volume_context."+k, "is longer than %d bytes or not valid UTF-8", maxContextVal)
		}
	}
	return nil
}

// validatePodUID checks a workload pod UID before it is used in names and paths.
func validatePodUID(field, uid string) error {
	if err := validateText(field, uid, 64); err != nil {
		return err
	}
	if !safetext.IsWord(uid, "-") {
		return invalid(field, "%q is not a pod UID", uid)
	}
	return nil
}

// accessMode validates the capability and returns its access mode. Only filesystem (mount)
// volumes are supported, in every access mode Kubernetes can ask for: the multi-node ones
// (ReadWriteMany, ReadOnlyMany) and the single-node ones (ReadWriteOnce, ReadWriteOncePod,
// ReadOnlyMany on one node). A bucket mount is the same whatever the mode; keeping a
// single-node volume on one node (or one pod) is the scheduler's and kubelet's promise, which
// the driver cannot add to. MULTI_NODE_SINGLE_WRITER is refused: nothing on one node can stop
// a second node from writing the same bucket.
func accessMode(vc *csi.VolumeCapability) (csi.VolumeCapability_AccessMode_Mode, error) {
	if vc == nil {
		return 0, invalid("volume_capability", "is required")
	}
	if vc.GetBlock() != nil {
		return 0, invalid("volume_capability.access_type", "block volumes are not supported; S3 volumes are filesystem (mount) volumes")
	}
	if vc.GetMount() == nil {
		return 0, invalid("volume_capability.access_type", "mount is required")
	}
	mode := vc.GetAccessMode().GetMode()
	switch mode {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return mode, nil
	}
	return 0, invalid("volume_capability.access_mode", "%s is not supported; use ReadWriteMany, ReadOnlyMany, ReadWriteOnce or ReadWriteOncePod", mode)
}

// isReadOnlyMode reports whether an access mode lets no workload write (mount-s3 --read-only).
func isReadOnlyMode(mode csi.VolumeCapability_AccessMode_Mode) bool {
	return mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY || mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
}

// validateFSType accepts what kubelet may pass from PV.spec.csi.fsType; it has no meaning for
// S3 volumes and is ignored.
func validateFSType(fsType string) error {
	if fsType == "" {
		return nil
	}
	if len(fsType) > 32 || strings.ToLower(fsType) != fsType || !safetext.IsWord(fsType, ".-") {
		return invalid("volume_capability.mount.fs_type", "%q is not a filesystem type name", fsType)
	}
	return nil
}
