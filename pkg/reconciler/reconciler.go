package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Request is one unit of work. Exactly one field is set:
//   - Key: bring the key's attachment and Mountpoint Pods in line with its workloads;
//   - Pod: a workload some of whose volumes cannot be served yet: report why (events);
//   - MountpointPod: housekeeping of one Mountpoint Pod (delete when Succeeded, retire orphans).
type Request struct {
	Key           podcontract.Key
	Pod           types.NamespacedName
	MountpointPod string
}

// Config configures the reconciler.
type Config struct {
	MountpointPod MountpointPodConfig
	// BatchWindow coalesces events for a key that was reconciled less than this long ago.
	BatchWindow time.Duration
	// OrphanGrace is how old an unreferenced Mountpoint Pod must be before it is retired.
	OrphanGrace time.Duration
	// DefaultMode is the cluster's default mount mode; a node's label overrides it
	// (mountmode.Resolve). New workloads get Mountpoint Pods only on pod-mode nodes.
	DefaultMode mountmode.Mode
}

// Reconciler implements reconcile.TypedReconciler[Request].
type Reconciler struct {
	client     client.Client        // cached reads (Mountpoint Pods, claims, volumes, nodes, attachments), writes
	workloads  *workloadStore       // workload pods
	byWorkload *workloadAttachments // the attachments recording each workload
	apiReader  client.Reader        // uncached reads, for the rare "is it really gone?" question
	recorder   events.EventRecorder
	cfg        Config
	metrics    *metrics

	overlay overlay
	expect  podExpectations
	gate    *gate // nil: no bound beyond the controller's

	mu     sync.Mutex
	last   map[podcontract.Key]time.Time // when each key was last reconciled (for coalescing)
	held   map[podcontract.Key]struct{}  // keys waiting out their batch window (enqueueKey)
	heldIn queue                         // the queue they wait in
}

var _ reconcile.TypedReconciler[Request] = (*Reconciler)(nil)

// Event reasons on workload pods.
const (
	ReasonVolumeNotBound        = "S3VolumeNotBound"
	ReasonVolumeMisconfigured   = "S3VolumeMisconfigured"
	ReasonMountpointPodFailed   = "MountpointPodCreationFailed"
	ReasonAttachmentWriteFailed = "MountpointAttachmentFailed"
	ReasonUnschedulable         = "MountpointPodUnschedulable"
)

// Reconcile dispatches a request.
func (r *Reconciler) Reconcile(ctx context.Context, req Request) (reconcile.Result, error) {
	if r.gate != nil {
		if err := r.gate.acquire(ctx); err != nil {
			return reconcile.Result{}, err
		}
		defer r.gate.release()
	}
	var res reconcile.Result
	var err error
	switch {
	case req.MountpointPod != "":
		res, err = r.reconcileMountpointPod(ctx, req.MountpointPod)
	case req.Pod != (types.NamespacedName{}):
		err = r.diagnoseWorkload(ctx, req.Pod)
	default:
		r.mu.Lock()
		if r.last == nil {
			r.last = map[podcontract.Key]time.Time{}
		}
		r.last[req.Key] = time.Now()
		delete(r.held, req.Key)
		r.mu.Unlock()
		res, err = r.reconcileKey(ctx, req.Key)
	}
	if err != nil {
		r.metrics.reconcileErrors.WithLabelValues(requestKind(req)).Inc()
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			// Someone else wrote first: retry on fresh data, without logging an error.
			log.FromContext(ctx).V(1).Info("Write raced, retrying", "err", err.Error())
			return reconcile.Result{RequeueAfter: raceRetry}, nil
		}
	}
	return res, err
}

func requestKind(req Request) string {
	switch {
	case req.MountpointPod != "":
		return "mountpointpod"
	case req.Pod != (types.NamespacedName{}):
		return "workload"
	}
	return "attachment"
}

// sinceLast reports how long ago key was last reconciled (a large value when never).
func (r *Reconciler) sinceLast(k podcontract.Key) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.last[k]
	if !ok {
		return time.Duration(1<<62 - 1)
	}
	return time.Since(t)
}

// pruneLast forgets keys not reconciled for a while (called by the periodic resync).
func (r *Reconciler) pruneLast() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, t := range r.last {
		if time.Since(t) > time.Minute {
			delete(r.last, k)
		}
	}
}

// nodeMode returns a node's effective mount mode, resolved exactly as the node plugin resolves
// it. A node the cache does not know gets the default.
func (r *Reconciler) nodeMode(ctx context.Context, name string) (mountmode.Mode, error) {
	var node corev1.Node
	if err := r.client.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return r.defaultMode(), nil
		}
		return "", err
	}
	mode, _ := mountmode.Resolve(node.Labels, r.defaultMode()) // the node plugin reports invalid labels
	return mode, nil
}

func (r *Reconciler) defaultMode() mountmode.Mode {
	if r.cfg.DefaultMode == "" {
		return mountmode.Default
	}
	return r.cfg.DefaultMode
}

// raceRetry is how soon a key whose write raced another writer is reconciled again: the cache
// has the other write by then, as a rule.
const raceRetry = 100 * time.Millisecond

// problem is a reason a workload volume cannot be served yet.
type problem struct{ reason, message string }

// isOurs reports whether pv is a CSI volume of this driver.
func isOurs(pv *corev1.PersistentVolume) bool {
	return pv.Spec.CSI != nil && pv.Spec.CSI.Driver == version.DriverName
}

// workloadKeys returns the sharing keys of w's volumes that this driver serves, and the
// problems that keep other volumes of this driver from being served. Only the cache is read.
// Unscheduled pods have no keys.
func (r *Reconciler) workloadKeys(ctx context.Context, w *workload) ([]podcontract.Key, []problem, error) {
	if w.NodeName == "" {
		return nil, nil, nil
	}
	var keys []podcontract.Key
	var problems []problem
	for _, claim := range w.Claims {
		k, p, err := r.volumeKey(ctx, w, claim)
		if err != nil {
			return nil, nil, err
		}
		if k != nil && !slices.Contains(keys, *k) {
			keys = append(keys, *k)
		}
		if p != nil {
			problems = append(problems, *p)
		}
	}
	return keys, problems, nil
}

// volumeKey resolves one PVC of w to its key, or to a problem when the volume is this
// driver's but cannot be served yet, or to neither when it is not this driver's.
func (r *Reconciler) volumeKey(ctx context.Context, w *workload, claim string) (*podcontract.Key, *problem, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: claim}, &pvc); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		ours, err := r.claimIsOurs(ctx, &pvc)
		if err != nil || !ours {
			return nil, nil, err
		}
		return nil, &problem{ReasonVolumeNotBound, fmt.Sprintf("PersistentVolumeClaim %s is not bound yet; the Mountpoint Pod is created once it is", claim)}, nil
	}
	var pv corev1.PersistentVolume
	if err := r.client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
		ours, err := r.claimIsOurs(ctx, &pvc)
		if err != nil || !ours {
			return nil, nil, err
		}
		return nil, &problem{ReasonVolumeMisconfigured, fmt.Sprintf("PersistentVolumeClaim %s is bound to PersistentVolume %s, which does not exist", claim, pvc.Spec.VolumeName)}, nil
	}
	if !isOurs(&pv) {
		return nil, nil, nil
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != pvc.Name || ref.Namespace != pvc.Namespace {
		return nil, nil, nil // binding still in progress; the PV update will bring us back
	}
	if pv.Spec.CSI.VolumeAttributes["bucketName"] == "" {
		return nil, &problem{ReasonVolumeMisconfigured, fmt.Sprintf("PersistentVolume %s has no volumeAttributes.bucketName", pv.Name)}, nil
	}
	if a := pv.Spec.CSI.VolumeAttributes["authenticationSource"]; a != "" && a != "driver" && a != "secret" {
		return nil, &problem{ReasonVolumeMisconfigured, fmt.Sprintf("PersistentVolume %s has authenticationSource %q; use driver or secret", pv.Name, a)}, nil
	}
	if pv.Spec.CSI.VolumeHandle == "" {
		return nil, &problem{ReasonVolumeMisconfigured, fmt.Sprintf("PersistentVolume %s has no volumeHandle", pv.Name)}, nil
	}
	if _, err := mountresources.Resolve(r.cfg.MountpointPod.Resources, pv.Spec.CSI.VolumeAttributes); err != nil {
		return nil, &problem{ReasonVolumeMisconfigured, fmt.Sprintf("PersistentVolume %s: %v", pv.Name, err)}, nil
	}
	k := keyFor(w, &pv)
	return &k, nil, nil
}

// claimIsOurs reports whether an unbound (or dangling) claim is meant for this driver, judged
// by its StorageClass's provisioner. Claims of other drivers must not get our events.
func (r *Reconciler) claimIsOurs(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	sc := pvc.Spec.StorageClassName
	if sc == nil || *sc == "" {
		return false, nil
	}
	var class storagev1.StorageClass
	if err := r.client.Get(ctx, types.NamespacedName{Name: *sc}, &class); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return class.Provisioner == version.DriverName, nil
}

// diagnoseWorkload reports, as events on the pod, why some of its volumes cannot be served.
func (r *Reconciler) diagnoseWorkload(ctx context.Context, nn types.NamespacedName) error {
	w, ok := r.workloads.get(nn)
	if !ok || w.ended() {
		return nil
	}
	_, problems, err := r.workloadKeys(ctx, w)
	if err != nil {
		return err
	}
	for _, p := range problems {
		log.FromContext(ctx).Info("Workload volume cannot be served yet", "pod", nn.String(), "reason", p.reason, "message", p.message)
		r.recorder.Eventf(w.ref(), nil, corev1.EventTypeWarning, p.reason, "Mount", "%s", p.message)
	}
	return nil
}

// errRequeue asks for a retry without counting as a failure of the request's input.
var errRequeue = errors.New("retry later")
