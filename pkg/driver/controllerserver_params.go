package driver

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/s3"
	"github.com/s3csi/s3-csi-driver/pkg/safetext"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
)

// StorageClass parameters of dynamically provisioned volumes.
const (
	paramBucketNamePrefix = "bucketNamePrefix"
	paramDeletionPolicy   = "bucketDeletionPolicy"
	// secretRegion is the optional provisioner secret key naming the region to sign with.
	secretRegion = "region"
)

// provisionerMetadataKeys are the parameters the external-provisioner adds itself when it runs
// with --extra-create-metadata. They are accepted and not used. (It strips every other
// csi.storage.k8s.io/ parameter, the secret references among them, before calling CreateVolume.)
var provisionerMetadataKeys = []string{
	"csi.storage.k8s.io/pv/name",
	"csi.storage.k8s.io/pvc/name",
	"csi.storage.k8s.io/pvc/namespace",
}

// Bounds of request fields of the Controller service.
const (
	// maxVolumeName is the longest CSI volume name accepted: CSI asks plugins to accept at least
	// 128 characters; the name is stored as a bucket tag value (at most 256).
	maxVolumeName  = 128
	maxParams      = 32
	maxParamKey    = 256
	maxParamValue  = 1024
	maxRegion      = 64
	maxShownKeyLen = 64
)

// deletionPolicy says what DeleteVolume does with a volume's bucket (StorageClass parameter
// bucketDeletionPolicy, recorded in the volume id).
type deletionPolicy string

const (
	// policyDelete deletes the bucket if it is empty and fails with FailedPrecondition, keeping
	// the bucket, if it is not. The default: data is never deleted unless asked for.
	policyDelete deletionPolicy = "delete"
	// policyDeleteWithObjects deletes every object, version and incomplete upload, then the
	// bucket, in bounded steps resumed by the provisioner's retries.
	policyDeleteWithObjects deletionPolicy = "deleteWithObjects"
	// policyRetain keeps the bucket; DeleteVolume succeeds without touching the store.
	policyRetain deletionPolicy = "retain"
)

var policies = []deletionPolicy{policyDelete, policyDeleteWithObjects, policyRetain}

// volumeParams are the validated StorageClass parameters of a CreateVolume request.
type volumeParams struct {
	prefix string
	policy deletionPolicy
	// recovery is the mountRecovery volume attribute to give the volume ("" for the default).
	recovery string
	// secretScope is the nodePublishSecretScope volume attribute ("" for the default, claim).
	secretScope string
	// resources are the mountpoint{CPU,Memory}{Request,Limit} volume attributes given.
	resources map[string]string
}

// parseParameters validates CreateVolume parameters: the known keys with their values, the
// external-provisioner's metadata keys, and nothing else — an unknown key (a typo, or a
// parameter of another driver) is refused with every unknown key named, so it is not silently
// ignored.
func parseParameters(params map[string]string) (volumeParams, error) {
	p := volumeParams{policy: policyDelete}
	if len(params) > maxParams {
		return p, invalid("parameters", "has %d keys, at most %d are accepted", len(params), maxParams)
	}
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		v := params[k]
		if err := validateText("parameters key", k, maxParamKey); err != nil {
			return p, err
		}
		if len(v) > maxParamValue || !utf8.ValidString(v) {
			return p, invalid("parameters."+shownKey(k), "is longer than %d bytes or not valid UTF-8", maxParamValue)
		}
		switch {
		case k == paramBucketNamePrefix:
			if err := s3.ValidatePrefix(v); err != nil {
				return p, fieldError("parameters."+k, err)
			}
			p.prefix = v
		case k == paramDeletionPolicy:
			policy, err := parsePolicy(v)
			if err != nil {
				return p, fieldError("parameters."+k, err)
			}
			p.policy = policy
		case k == ctxRecovery:
			if v != mounter.RecoveryRepair && v != mounter.RecoveryRestartPod {
				return p, invalid("parameters."+k, "%q is not a recovery policy: use %s or %s", v, mounter.RecoveryRepair, mounter.RecoveryRestartPod)
			}
			p.recovery = v
		case k == secretscope.Attribute:
			if v != secretscope.Claim && v != secretscope.Any {
				return p, invalid("parameters."+k, "%q is not a secret scope: use %s (the node-publish secret must live in the claim's namespace) or %s (anywhere)", shownKey(v), secretscope.Claim, secretscope.Any)
			}
			p.secretScope = v
		case mountresources.IsAttribute(k):
			if _, err := mountresources.Parse("parameters."+k, v); err != nil {
				return p, fmt.Errorf("%w: %v", errInvalidArgument, err)
			}
			if p.resources == nil {
				p.resources = map[string]string{}
			}
			p.resources[k] = v
		case slices.Contains(provisionerMetadataKeys, k):
		default:
			unknown = append(unknown, shownKey(k))
		}
	}
	if len(unknown) > 0 {
		return p, invalid("parameters", "unknown keys %q; accepted: %q, %q, %q, %q, %q and the external-provisioner's %q", unknown, paramBucketNamePrefix, paramDeletionPolicy, ctxRecovery, secretscope.Attribute, mountresources.Attributes(), provisionerMetadataKeys)
	}
	if _, err := mountresources.Resolve(corev1.ResourceRequirements{}, p.resources); err != nil {
		return p, invalid("parameters", "%v", err)
	}
	return p, nil
}

// parsePolicy accepts exactly the documented policy names.
func parsePolicy(v string) (deletionPolicy, error) {
	for _, p := range policies {
		if v == string(p) {
			return p, nil
		}
	}
	if v == "" {
		return "", fmt.Errorf("%w: is empty; use one of %q", errInvalidArgument, policies)
	}
	return "", fmt.Errorf("%w: %q is not one of %q", errInvalidArgument, shownKey(v), policies)
}

// shownKey makes a caller-supplied string safe to quote in an error message: bounded and valid
// UTF-8.
func shownKey(k string) string {
	if !utf8.ValidString(k) {
		k = strings.ToValidUTF8(k, "?")
	}
	if len(k) > maxShownKeyLen {
		return k[:maxShownKeyLen] + "..."
	}
	return k
}

// validateVolumeName checks a CreateVolume name: 1-128 characters of letters, digits and
// - _ . : / @ + = (what S3 accepts in a tag value, where the name is recorded).
func validateVolumeName(name string) error {
	if err := validateText("name", name, maxVolumeName); err != nil {
		return err
	}
	if !safetext.IsWord(name, "-_.:/@+=") {
		return invalid("name", "%q may only hold letters, digits and - _ . : / @ + =", name)
	}
	return nil
}

// validateRegion checks the optional region of a provisioner secret without quoting it.
func validateRegion(region string) error {
	if region == "" || len(region) > maxRegion || !safetext.IsWord(region, "-_.") {
		return invalid("secrets", "%s must be 1-%d letters, digits, '-', '_' or '.'", secretRegion, maxRegion)
	}
	return nil
}

// Volume ids of dynamically provisioned volumes are "v1:<bucketDeletionPolicy>:<bucket>", for
// example "v1:delete:pvc-0b5e7c3a-9f1d-4c2e-8a6b-1d2e3f4a5b6c". DeleteVolume receives nothing
// but the id and the secrets, so the id carries what deletion needs; the version leaves room
// for other formats later.
const volumeIDVersion = "v1"

// volumeID is a parsed volume id.
type volumeID struct {
	policy deletionPolicy
	bucket string
}

func (v volumeID) String() string {
	return volumeIDVersion + ":" + string(v.policy) + ":" + v.bucket
}

// errForeignVolumeID marks a volume id this controller never creates (for example the handle
// of a statically provisioned PersistentVolume): no bucket of the controller belongs to it.
var errForeignVolumeID = errors.New("not a volume id of a dynamically provisioned volume")

// parseVolumeID parses id (already checked with validateText). Ids that do not start with a
// version ("v" and digits, then ":") are errForeignVolumeID; ids of another version, or "v1"
// ids that are malformed, are InvalidArgument errors about field: the driver never made them,
// and deleting or confirming something for them would be a guess.
func parseVolumeID(field, id string) (volumeID, error) {
	version, rest, ok := strings.Cut(id, ":")
	if !ok || len(version) < 2 || version[0] != 'v' {
		return volumeID{}, errForeignVolumeID
	}
	if _, err := strconv.ParseUint(version[1:], 10, 16); err != nil {
		return volumeID{}, errForeignVolumeID
	}
	if version != volumeIDVersion {
		return volumeID{}, invalid(field, "volume id version %q is not supported by this driver version (%s)", version, volumeIDVersion)
	}
	policy, bucket, ok := strings.Cut(rest, ":")
	if !ok {
		return volumeID{}, invalid(field, "a %s volume id has the form %s:<bucketDeletionPolicy>:<bucket>", volumeIDVersion, volumeIDVersion)
	}
	p, err := parsePolicy(policy)
	if err != nil {
		return volumeID{}, fieldError(field, fmt.Errorf("deletion policy: %w", err))
	}
	if err := s3.ValidBucketName(bucket); err != nil {
		return volumeID{}, fieldError(field, err)
	}
	return volumeID{policy: p, bucket: bucket}, nil
}
