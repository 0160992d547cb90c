package mounter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/pkg/legacy"
	"github.com/s3csi/s3-csi-driver/pkg/mounthealth"
	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
)

// A mount of the Scality driver 1.x (mount-s3 directly at the target, no record of either
// mode) is systemd mode's to adopt (see systemd.Mounter). On a node plugin without systemd mode
// (--systemd-mounter=false: a pod-only chart installed over 1.x), the Router adopts it itself
// with what pod mode can do: unmount directly.

// legacyAlone reports whether a mount the Router classified as mode m must be handled here:
// systemd mode is missing and pod mode, which can unmount, is there.
func (r *Router) legacyAlone(m mountmode.Mode) bool {
	return m == mountmode.Systemd && r.systemd == nil && r.pod != nil
}

// isLegacy reports whether the direct mount-s3 mount at target is the 1.x driver's: systemd
// mode, when it is here and keeps records, has none of it.
func (r *Router) isLegacy(target string) bool {
	if r.systemd == nil {
		return true
	}
	rep, ok := r.systemd.(Repairer)
	return ok && !rep.Recorded(target)
}

// pluginDir is <kubelet>/plugins/s3.csi.scality.com, where 1.x kept credential files.
func (r *Router) pluginDir() string { return filepath.Dir(r.sourceRoot) }

// mountLegacy keeps a live 1.x mount (its credential files rewritten when the request carries
// credentials and they exist) and replaces a dead one by a mount in the node's current mode.
func (r *Router) mountLegacy(ctx context.Context, req Request) error {
	res, err := (&mounthealth.Checker{Table: r.table}).Check(ctx, req.Target)
	if err != nil {
		return err
	}
	files := legacy.FilesFor(req.WorkloadPodUID, req.VolumeID)
	if res.State == mounthealth.Live {
		if req.Credentials != nil && req.WorkloadPodUID != "" {
			if _, err := legacy.Refresh(r.pluginDir(), files, *req.Credentials); err != nil {
				return fmt.Errorf("refresh the credentials of a 1.x mount: %w", err)
			}
		}
		klog.V(2).InfoS("Keeping a live mount of the 1.x driver", "target", req.Target, "volumeID", req.VolumeID)
		return nil
	}
	klog.InfoS("A mount of the 1.x driver is dead; mounting the volume again in this node's mode", "target", req.Target, "cause", res.Cause, "mode", r.mode())
	if err := r.pod.Unmount(ctx, req.Target); err != nil {
		return err
	}
	if err := legacy.Remove(r.pluginDir(), files); err != nil {
		klog.ErrorS(err, "Removing the credential files of a dead 1.x mount", "target", req.Target)
	}
	impl, err := r.impl(r.mode())
	if err != nil {
		return err
	}
	return impl.Mount(ctx, req)
}

// unmountLegacy unmounts a 1.x mount (its mount-s3 exits, and with it its transient unit) and
// removes its credential files when they can be told apart (legacy.RemoveForPod).
func (r *Router) unmountLegacy(ctx context.Context, target string) error {
	if err := r.pod.Unmount(ctx, target); err != nil {
		return err
	}
	kubelet := filepath.Dir(filepath.Dir(r.pluginDir()))
	if rel, ok := strings.CutPrefix(target, kubelet+"/pods/"); ok {
		pod, _, _ := strings.Cut(rel, "/")
		removed, err := legacy.RemoveForPod(r.pluginDir(), pod)
		if err != nil {
			klog.ErrorS(err, "Removing the credential files of a 1.x mount", "target", target)
		}
		klog.V(2).InfoS("Unmounted a mount of the 1.x driver", "target", target, "credentialFilesRemoved", removed)
	}
	return nil
}
