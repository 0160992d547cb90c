package driver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/inflight"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/secretscope"
	"github.com/s3csi/s3-csi-driver/pkg/targetpath"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// NodeConfig configures the Node service.
type NodeConfig struct {
	// NodeID is returned by NodeGetInfo (the Kubernetes node name).
	NodeID string
	// MaxVolumesPerNode is returned by NodeGetInfo; 0 means no limit.
	MaxVolumesPerNode int64
	// KubeletPath is the kubelet root directory; every target must be below <KubeletPath>/pods.
	KubeletPath string
	// S3EndpointURL and S3Region are given to mount-s3 as AWS_ENDPOINT_URL and AWS_REGION.
	S3EndpointURL string
	S3Region      string
	// DriverCredentials are the node plugin's own credentials (authenticationSource driver);
	// nil when it has none.
	DriverCredentials *credentials.Credentials
	// CABundle (PEM) is given to every mount for mount-s3 to trust (nil: system CAs).
	CABundle []byte
	// Health judges mounts for NodeGetVolumeStats (default: mounthealth's default deadline).
	Health *mounthealth.Checker
	// Locks serialise operations per target; the node plugin's own mount monitor takes the same
	// locks (default: a set of the server's own).
	Locks *inflight.Set
	// Published lists the targets the mount modes have published (their records), for
	// NodeGetVolumeHealth without a path; nil: none are known.
	Published func() []mounter.Target
	// Observer hears of every publish (the node plugin's mount monitor); nil: nobody.
	Observer PublishObserver
	// SecretScope, when set, is asked before every publish whose credentials come from a
	// node-publish Secret whether that Secret may be used for the volume's claim (tenant
	// isolation, pkg/secretscope); nil: any Secret kubelet hands over is used.
	SecretScope SecretScope
	// MountResources are mount-s3's default requests and limits; a volume's attributes
	// (mountresources) override them.
	MountResources corev1.ResourceRequirements
	// Proxy is given to every mount-s3 as HTTPS_PROXY, HTTP_PROXY and NO_PROXY (checked by
	// proxyenv.Parse); zero: none.
	Proxy proxyenv.Config
}

// SecretScope decides whether a publish may use its node-publish Secret.
type SecretScope interface {
	Check(ctx context.Context, p secretscope.Publish) error
}

// PublishObserver is told of each publish before it runs, with the target's lock held, and of
// its outcome: a publish that finds a dead mount repairs it (mounter.Mounter.Mount), and that
// repair is reported (Events, metrics, the recovery policy) like the mount monitor's own. It is
// told of each unpublish that succeeded too: on kernels where pod mode's targets are peers,
// unmounting a repaired target takes the repair away from the targets sharing its mount (see
// docs/architecture.md), which must then be checked at once.
type PublishObserver interface {
	Publishing(ctx context.Context, t mounter.Target) (done func(ctx context.Context, err error))
	Unpublished(target string)
}

// NodeServer implements the CSI Node service on top of a mounter.Mounter.
type NodeServer struct {
	csi.UnimplementedNodeServer
	cfg      NodeConfig
	mounter  mounter.Mounter
	inflight *inflight.Set
}

// NewNodeServer returns the Node service.
func NewNodeServer(cfg NodeConfig, m mounter.Mounter) (*NodeServer, error) {
	if err := validateText("node id", cfg.NodeID, 256); err != nil {
		return nil, fmt.Errorf("node id: %w", err)
	}
	if cfg.MaxVolumesPerNode < 0 {
		return nil, fmt.Errorf("max volumes per node must not be negative")
	}
	if cfg.KubeletPath == "" || cfg.S3Region == "" {
		return nil, fmt.Errorf("kubelet path and S3 region are required")
	}
	if cfg.Health == nil {
		cfg.Health = &mounthealth.Checker{}
	}
	if cfg.Locks == nil {
		cfg.Locks = &inflight.Set{}
	}
	return &NodeServer{cfg: cfg, mounter: m, inflight: cfg.Locks}, nil
}

// NodeGetCapabilities advertises VOLUME_MOUNT_GROUP (the workload's fsGroup is applied through
// mount-s3 options, in both mount modes, instead of kubelet's recursive chown), GET_VOLUME_STATS
// and GET_VOLUME_HEALTH (NodeGetVolumeHealth: whether mount-s3 serves the mount; CSI 1.13's
// successor of the VolumeCondition it removed, see docs/adr/0005-volume-health.md).
//
// SINGLE_NODE_MULTI_WRITER is deliberately not advertised: with it, the CSI spec requires
// refusing a SINGLE_NODE_SINGLE_WRITER volume already published at another target of the node,
// which the plugin cannot know across restarts; Kubernetes enforces ReadWriteOncePod itself
// (scheduler and kubelet) and sends SINGLE_NODE_WRITER for it without the capability.
func (s *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, c := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkVolumePath validates a volume id and the path it is published at, and checks the mount
// there (never blocking on a daemon that does not answer). A path holding no mount of the
// driver is NotFound.
func (s *NodeServer) checkVolumePath(ctx context.Context, volumeID, path, pathField, staging string) (mounthealth.Result, error) {
	if err := validateText("volume_id", volumeID, maxVolumeID); err != nil {
		return mounthealth.Result{}, err
	}
	if err := validateText(pathField, path, targetpath.MaxLen); err != nil {
		return mounthealth.Result{}, err
	}
	tp, err := targetpath.Parse(s.cfg.KubeletPath, path)
	if err != nil {
		// Not a path this driver publishes to: no volume of it can be there (CSI: NotFound).
		return mounthealth.Result{}, fieldError(pathField, fmt.Errorf("%w: no volume of this driver can be at %q (%v)", errVolumeNotFound, path, err))
	}
	if staging != "" {
		if err := validateText("staging_target_path", staging, targetpath.MaxLen); err != nil {
			return mounthealth.Result{}, err
		}
	}
	r, err := s.cfg.Health.Check(ctx, tp.Path)
	if err != nil {
		return r, err
	}
	if r.State != mounthealth.Live && r.State != mounthealth.Dead {
		return r, fieldError(pathField, fmt.Errorf("%w: %s holds no mount of volume %q (%s)", errVolumeNotFound, tp.Path, volumeID, r.State))
	}
	return r, nil
}

// NodeGetVolumeStats reports the volume's usage where mount-s3 serves it: bytes without figures
// (a bucket has no size, so they are unknown, which the CSI spec expresses by leaving them
// unset) and no inodes (the spec lets unavailable inode figures be omitted). A dead mount is
// never reported as fine: it is FailedPrecondition with the cause (NodeGetVolumeHealth reports
// it as INACCESSIBLE). A path holding no mount of the driver is NotFound.
func (s *NodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	r, err := s.checkVolumePath(ctx, req.GetVolumeId(), req.GetVolumePath(), "volume_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	if r.State == mounthealth.Dead {
		return nil, fmt.Errorf("%w: the mount-s3 mount at %s is dead (%v); the node plugin mounts it again", errMountDead, req.GetVolumePath(), r.Cause)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES}}}, nil
}

// NodeGetVolumeHealth reports whether mount-s3 serves the volume at volume_publish_path: no
// health status when it answers (within the health deadline), INACCESSIBLE (reason MountDead,
// the cause in the message) when it is dead. A path holding no mount of the driver is NotFound.
func (s *NodeServer) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if req.GetVolumePublishPath() == "" { // optional: every target of the volume on this node
		return s.volumeHealth(ctx, req.GetVolumeId())
	}
	r, err := s.checkVolumePath(ctx, req.GetVolumeId(), req.GetVolumePublishPath(), "volume_publish_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	h := &csi.VolumeHealth{VolumeId: req.GetVolumeId()}
	if r.State == mounthealth.Dead {
		h.HealthStatuses = []*csi.VolumeHealth_VolumeHealthEntry{{
			Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
			Reason:  "MountDead",
			Message: fmt.Sprintf("the mount-s3 mount at %s is dead (%v); the node plugin mounts it again", req.GetVolumePublishPath(), r.Cause),
		}}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// volumeHealth reports the health of every target volumeID is published at on this node
// (NodeGetVolumeHealth without volume_publish_path): INACCESSIBLE for each dead one, NotFound
// when it is published nowhere here.
func (s *NodeServer) volumeHealth(ctx context.Context, volumeID string) (*csi.NodeGetVolumeHealthResponse, error) {
	if err := validateText("volume_id", volumeID, maxVolumeID); err != nil {
		return nil, err
	}
	var targets []string
	if s.cfg.Published != nil {
		for _, t := range s.cfg.Published() {
			if t.VolumeID == volumeID {
				targets = append(targets, t.Path)
			}
		}
	}
	if len(targets) == 0 {
		return nil, fieldError("volume_id", fmt.Errorf("%w: volume %q is not published on this node", errVolumeNotFound, volumeID))
	}
	slices.Sort(targets)
	h := &csi.VolumeHealth{VolumeId: volumeID}
	for _, path := range targets {
		r, err := s.cfg.Health.Check(ctx, path)
		if err != nil {
			return nil, err
		}
		if r.State != mounthealth.Live {
			h.HealthStatuses = append(h.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
				Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
				Reason:  "MountDead",
				Message: fmt.Sprintf("the mount-s3 mount at %s is %s (%v); the node plugin mounts it again", path, r.State, r.Cause),
			})
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// NodeGetInfo returns the node id and the volume limit.
func (s *NodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.cfg.NodeID, MaxVolumesPerNode: s.cfg.MaxVolumesPerNode}, nil
}

// NodePublishVolume validates the request, turns it into a mounter.Request and mounts. It is
// idempotent (a republish of a live mount refreshes its credentials) and refuses, with
// Aborted, a second concurrent operation on the same target (it waits for a repair by the
// node plugin's own mount monitor instead).
func (s *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	mreq, source, err := s.mountRequest(req)
	if err != nil {
		return nil, err
	}
	if source == credentials.SourceSecret && s.cfg.SecretScope != nil {
		p := secretscope.Publish{PVName: mreq.PVName, VolumeID: mreq.VolumeID, PodNamespace: mreq.WorkloadNamespace}
		if err := s.cfg.SecretScope.Check(ctx, p); err != nil {
			klog.InfoS("Publish refused: its node-publish secret may not be used for this claim", "volumeID", mreq.VolumeID, "pv", mreq.PVName, "target", mreq.Target, "reason", err.Error())
			return nil, fieldError("secrets", err)
		}
	}
	release, ok := s.inflight.Acquire(ctx, mreq.Target)
	if !ok {
		return nil, fieldError("target_path", fmt.Errorf("%w: %s", errBusy, mreq.Target))
	}
	defer release()
	klog.V(4).InfoS("Publishing volume", "volumeID", mreq.VolumeID, "target", mreq.Target, "bucket", mreq.Bucket, "readOnly", mreq.ReadOnly, "fsGroup", mreq.FSGroup)
	done := func(context.Context, error) {}
	if s.cfg.Observer != nil {
		done = s.cfg.Observer.Publishing(ctx, mreq.PublishedTarget())
	}
	err = s.mounter.Mount(ctx, mreq)
	done(ctx, err)
	if err != nil {
		return nil, fmt.Errorf("publish volume %q at %s: %w", mreq.VolumeID, mreq.Target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// mountRequest validates every field of req, in CSI order, and builds the mount request; it
// also returns where the credentials come from.
func (s *NodeServer) mountRequest(req *csi.NodePublishVolumeRequest) (mounter.Request, credentials.Source, error) {
	var r mounter.Request
	if err := validateText("volume_id", req.GetVolumeId(), maxVolumeID); err != nil {
		return r, "", err
	}
	if req.GetTargetPath() == "" {
		return r, "", invalid("target_path", "is required")
	}
	tp, err := targetpath.Parse(s.cfg.KubeletPath, req.GetTargetPath())
	if err != nil {
		return r, "", fieldError("target_path", err)
	}
	if err := mounter.CheckTarget(tp.Path); err != nil {
		return r, "", fieldError("target_path", err)
	}
	mode, err := accessMode(req.GetVolumeCapability())
	if err != nil {
		return r, "", err
	}
	mnt := req.GetVolumeCapability().GetMount()
	if err := validateFSType(mnt.GetFsType()); err != nil {
		return r, "", err
	}
	if g := mnt.GetVolumeMountGroup(); g != "" {
		if err := mountargs.ValidateGID(g); err != nil {
			return r, "", fieldError("volume_capability.mount.volume_mount_group", err)
		}
	}
	vc := req.GetVolumeContext()
	if err := validateVolumeContext(vc); err != nil {
		return r, "", err
	}
	if err := validateBucketName("volume_context."+ctxBucketName, vc[ctxBucketName]); err != nil {
		return r, "", err
	}
	podUID, podNS := tp.PodUID, ""
	if v, ok := vc[ctxPodUID]; ok {
		if err := validatePodUID("volume_context."+ctxPodUID, v); err != nil {
			return r, "", err
		}
		podUID = v
	}
	if v, ok := vc[ctxPodNS]; ok {
		if err := validateText("volume_context."+ctxPodNS, v, 63); err != nil {
			return r, "", err
		}
		podNS = v
	}
	recovery := mounter.RecoveryRepair
	if v, ok := vc[ctxRecovery]; ok {
		if v != mounter.RecoveryRepair && v != mounter.RecoveryRestartPod {
			return r, "", invalid("volume_context."+ctxRecovery, "%q is not a recovery policy: use %s or %s", v, mounter.RecoveryRepair, mounter.RecoveryRestartPod)
		}
		recovery = v
	}
	if v, ok := vc[secretscope.Attribute]; ok && v != secretscope.Claim && v != secretscope.Any {
		return r, "", invalid("volume_context."+secretscope.Attribute, "%q is not a secret scope: use %s (the node-publish secret must live in the claim's namespace) or %s", v, secretscope.Claim, secretscope.Any)
	}
	podName := ""
	if v, ok := vc[ctxPodName]; ok {
		if err := validateText("volume_context."+ctxPodName, v, 253); err != nil {
			return r, "", err
		}
		podName = v
	}
	resources, err := mountresources.Resolve(s.cfg.MountResources, vc)
	if err != nil {
		return r, "", invalid("volume_context", "%v", err)
	}
	readOnly := req.GetReadonly() || isReadOnlyMode(mode)
	built, err := mountargs.Build(mountargs.Options{MountFlags: mnt.GetMountFlags(), ReadOnly: readOnly, FSGroup: mnt.GetVolumeMountGroup()})
	if err != nil {
		return r, "", fieldError("volume_capability.mount.mount_flags", err)
	}
	if err := setMemoryTarget(&built.Args, resources); err != nil {
		return r, "", fieldError("volume_capability.mount.mount_flags", err)
	}
	creds, source, err := credentials.Resolve(vc[ctxAuthSource], req.GetSecrets(), s.cfg.DriverCredentials, built.Args.Has("no-sign-request"))
	if err != nil {
		field := "secrets"
		if _, ok := vc[ctxAuthSource]; ok && source == "" {
			field = "volume_context." + ctxAuthSource
		}
		return r, "", fieldError(field, err)
	}
	built.Args.Set("user-agent-prefix", fmt.Sprintf("%s/%s credential-source#%s", version.DriverName, version.Version, source))
	if unknown := unknownContextKeys(vc); len(unknown) > 0 {
		klog.V(4).InfoS("Ignoring volume context keys", "volumeID", req.GetVolumeId(), "keys", unknown)
	}
	env := []string{"AWS_REGION=" + s.cfg.S3Region}
	if s.cfg.S3EndpointURL != "" {
		env = append(env, "AWS_ENDPOINT_URL="+s.cfg.S3EndpointURL)
	}
	env = append(env, s.cfg.Proxy.Env()...)
	return mounter.Request{
		VolumeID:          req.GetVolumeId(),
		PVName:            tp.PVName,
		WorkloadPodUID:    podUID,
		WorkloadNamespace: podNS,
		WorkloadPodName:   podName,
		Recovery:          recovery,
		Bucket:            vc[ctxBucketName],
		Target:            tp.Path,
		Args:              built.Args,
		Env:               append(env, built.Env...),
		Credentials:       creds,
		CABundle:          s.cfg.CABundle,
		ReadOnly:          readOnly,
		VolumeReadOnly:    isReadOnlyMode(mode) || slices.ContainsFunc(mnt.GetMountFlags(), isReadOnlyOption),
		FSGroup:           mnt.GetVolumeMountGroup(),
		Resources:         resources,
	}, source, nil
}

// setMemoryTarget gives mount-s3 a --memory-target under the mount's memory limit
// (mountresources.MemoryTargetMiB) unless the volume's mount options set one, which must then
// not exceed the limit; without a limit mount-s3 keeps its own default (95% of its cgroup's
// limit or of the node's memory). The read part size is checked against the target's data
// buffers, as mount-s3 checks it with an explicit target.
func setMemoryTarget(a *mountargs.Args, res corev1.ResourceRequirements) error {
	limit := mountresources.LimitMiB(res)
	if v, ok := a.Get("memory-target"); ok {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && limit > 0 && n > limit {
			return &mountargs.Error{Option: "memory-target=" + v, Reason: fmt.Sprintf("above the mount's memory limit (%d MiB): mount-s3 would be OOM-killed before it reached its target; use at most %d, or leave it out (the driver then sets %d)",
				limit, limit, mountresources.MemoryTargetMiB(res.Limits[corev1.ResourceMemory]))}
		}
	} else if limit > 0 {
		a.Set("memory-target", strconv.FormatUint(mountresources.MemoryTargetMiB(res.Limits[corev1.ResourceMemory]), 10))
	}
	return mountargs.CheckReadPartSize(*a)
}

// isReadOnlyOption reports whether a PV mount option is mount-s3's read-only flag.
func isReadOnlyOption(o string) bool {
	return strings.TrimLeft(strings.TrimSpace(o), "-") == "read-only"
}

// unknownContextKeys lists volume context keys this driver does not read (for a debug log).
func unknownContextKeys(vc map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(vc)) {
		switch k {
		case ctxBucketName, ctxAuthSource, ctxPodUID, ctxPodNS, ctxPodName, ctxRecovery, secretscope.Attribute,
			mountresources.AttrCPURequest, mountresources.AttrCPULimit, mountresources.AttrMemoryRequest, mountresources.AttrMemoryLimit:
		default:
			out = append(out, k)
		}
	}
	return out
}

// NodeUnpublishVolume unmounts the target and removes everything the publish created. A target
// that is not mounted, or gone, is success.
func (s *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := validateText("volume_id", req.GetVolumeId(), maxVolumeID); err != nil {
		return nil, err
	}
	if req.GetTargetPath() == "" {
		return nil, invalid("target_path", "is required")
	}
	tp, err := targetpath.Parse(s.cfg.KubeletPath, req.GetTargetPath())
	if err != nil {
		return nil, fieldError("target_path", err)
	}
	release, ok := s.inflight.Acquire(ctx, tp.Path)
	if !ok {
		return nil, fieldError("target_path", fmt.Errorf("%w: %s", errBusy, tp.Path))
	}
	defer release()
	if err := s.mounter.Unmount(ctx, tp.Path); err != nil {
		return nil, fmt.Errorf("unpublish volume %q from %s: %w", req.GetVolumeId(), tp.Path, err)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Unpublished(tp.Path)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
