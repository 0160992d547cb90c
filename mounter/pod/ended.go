package pod

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// reasonOOMKilled is the container runtime's reason for a container whose cgroup went over its
// memory limit and lost a process to the kernel's OOM killer.
const reasonOOMKilled = "OOMKilled"

// HowItEnded implements mounter.EndReporter: when the mount-s3 of target's Mountpoint Pod was
// OOM-killed (its container's last termination, at or after since less a minute of clock and
// status lag), it says so with the container's memory limit. It reads the pod from the API
// server (the cache keeps no container statuses); "" when it cannot tell.
func (m *Mounter) HowItEnded(ctx context.Context, target string, since time.Time) mounter.Ending {
	rec, ok := m.records.get(m.paths.targetRecord(target))
	if !ok {
		return mounter.Ending{}
	}
	pod, err := m.cluster.ReadMountpointPod(ctx, rec.MountpointPod)
	if err != nil || pod == nil {
		if err != nil {
			klog.V(2).InfoS("Mountpoint Pod not read to tell how its mount-s3 ended", "mountpointPod", rec.MountpointPod, "err", err)
		}
		return mounter.Ending{}
	}
	return oomKilled(pod, since.Add(-time.Minute))
}

// oomKilled reports an OOM kill of pod's mount-s3 container that ended at or after after.
func oomKilled(pod *corev1.Pod, after time.Time) mounter.Ending {
	for _, cs := range pod.Status.ContainerStatuses {
		for _, term := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if term == nil || term.Reason != reasonOOMKilled || term.FinishedAt.Time.Before(after) {
				continue
			}
			limit := "no memory limit (the node ran out of memory)"
			for _, c := range pod.Spec.Containers {
				if c.Name == cs.Name {
					if l, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
						limit = "its memory limit " + l.String()
					}
				}
			}
			return mounter.Ending{OOMKilled: true, Detail: fmt.Sprintf("mount-s3 in Mountpoint Pod %s/%s was OOM-killed at %s", pod.Namespace, pod.Name, limit)}
		}
	}
	return mounter.Ending{}
}
