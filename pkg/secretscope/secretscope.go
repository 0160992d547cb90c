// Package secretscope keeps one namespace from mounting with another's credentials: before a
// publish that uses a node-publish Secret, it checks that the Secret lives in the namespace of
// the claim the volume is bound to. kubelet hands the node plugin the Secret's content but not
// where it came from, so the check reads the PersistentVolume: its node-publish secret
// reference and its claim. A PV or StorageClass that means to share a Secret across
// namespaces says so explicitly (volume attribute nodePublishSecretScope: any).
package secretscope

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// The check reads the PersistentVolume being published.
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get

// Attribute is the volume attribute (StorageClass parameter for dynamic volumes) with which a
// PV allows its node-publish Secret to live outside the claim's namespace.
const Attribute = "nodePublishSecretScope"

// Scopes: the value of Attribute and of the node plugin's --node-publish-secret-scope.
const (
	// Claim: the Secret must live in the claim's namespace (the default).
	Claim = "claim"
	// Any: the Secret may live anywhere.
	Any = "any"
)

// ErrRefused marks a publish refused because its Secret lives outside the claim's namespace,
// or because the volume it is for cannot be told.
var ErrRefused = errors.New("node-publish secret refused")

// PVGetter reads a PersistentVolume.
type PVGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.PersistentVolume, error)
}

// Checker checks node-publish Secrets against claims.
type Checker struct {
	pvs PVGetter
}

// New returns a Checker reading PVs through cs.
func New(cs typedcorev1.CoreV1Interface) *Checker { return NewWithGetter(cs.PersistentVolumes()) }

// NewWithGetter returns a Checker reading PVs through g.
func NewWithGetter(g PVGetter) *Checker { return &Checker{pvs: g} }

// Publish describes a publish that carries a node-publish Secret.
type Publish struct {
	// PVName is the PV's name, from kubelet's target path; empty when the path does not say.
	PVName string
	// VolumeID is the request's volume id: it must be the PV's volume handle.
	VolumeID string
	// PodNamespace is the workload's namespace from the volume context (empty when kubelet did
	// not send it): it must be the claim's.
	PodNamespace string
}

// Check returns nil when p's Secret may be used: the PV names a node-publish Secret in its
// claim's namespace, or allows any namespace. Otherwise an error wrapping ErrRefused that names
// both namespaces and what to do, or mounter.ErrUnavailable when the API server cannot say.
func (c *Checker) Check(ctx context.Context, p Publish) error {
	if p.PVName == "" {
		return fmt.Errorf("%w: the target path does not name the PersistentVolume (not kubelet's layout), so where the node-publish secret may be used cannot be checked", ErrRefused)
	}
	pv, err := c.pvs.Get(ctx, p.PVName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: PersistentVolume %s does not exist", ErrRefused, p.PVName)
	case err != nil:
		return fmt.Errorf("%w: read PersistentVolume %s to check its node-publish secret: %v", mounter.ErrUnavailable, p.PVName, err)
	}
	src := pv.Spec.CSI
	if src == nil || src.Driver != version.DriverName || src.VolumeHandle != p.VolumeID {
		return fmt.Errorf("%w: PersistentVolume %s is not volume %q of %s", ErrRefused, p.PVName, p.VolumeID, version.DriverName)
	}
	ref, claim := src.NodePublishSecretRef, pv.Spec.ClaimRef
	if ref == nil {
		return fmt.Errorf("%w: PersistentVolume %s names no node-publish secret, but the publish carries one", ErrRefused, p.PVName)
	}
	if claim == nil {
		return fmt.Errorf("%w: PersistentVolume %s is bound to no claim", ErrRefused, p.PVName)
	}
	if p.PodNamespace != "" && p.PodNamespace != claim.Namespace {
		return fmt.Errorf("%w: PersistentVolume %s is bound to claim %s/%s, not to a claim of the workload's namespace %s", ErrRefused, p.PVName, claim.Namespace, claim.Name, p.PodNamespace)
	}
	scope := src.VolumeAttributes[Attribute]
	switch scope {
	case "", Claim:
	case Any:
		return nil
	default:
		return fmt.Errorf("%w: PersistentVolume %s: volume attribute %s is %q: use %s or %s", ErrRefused, p.PVName, Attribute, scope, Claim, Any)
	}
	if ref.Namespace != claim.Namespace {
		return fmt.Errorf("%w: PersistentVolume %s uses node-publish secret %s/%s, in namespace %s, but its claim %s/%s is in namespace %s: "+
			"a claim may use only a secret of its own namespace (StorageClass: csi.storage.k8s.io/node-publish-secret-namespace: ${pvc.namespace}; "+
			"a static PV: a secret in the claim's namespace), or the PV or StorageClass allows it with %s: %s",
			ErrRefused, p.PVName, ref.Namespace, ref.Name, ref.Namespace, claim.Namespace, claim.Name, claim.Namespace, Attribute, Any)
	}
	return nil
}

// NoAPI refuses every publish with a node-publish Secret: it stands in for a Checker where the
// node plugin has no Kubernetes API access to read the PersistentVolume.
type NoAPI struct{}

// Check implements the checker's contract: always refused.
func (NoAPI) Check(context.Context, Publish) error {
	return fmt.Errorf("%w: the node plugin has no Kubernetes API access (in-cluster or --kubeconfig) to check the namespace of the node-publish secret; give it access, or allow any namespace with --node-publish-secret-scope=%s", ErrRefused, Any)
}
