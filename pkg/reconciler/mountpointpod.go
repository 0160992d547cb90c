package reconciler

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3-csi-driver/pkg/mountresources"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// MountpointPodConfig is how Mountpoint Pods are built.
type MountpointPodConfig struct {
	// Namespace holds every Mountpoint Pod (mount-s3).
	Namespace string
	// Image is the driver image; Command runs scality-csi-mounter in it.
	Image           string
	Command         []string
	ImagePullPolicy corev1.PullPolicy
	// PriorityClassName is set when not empty.
	PriorityClassName string
	// Tolerations are copied onto every Mountpoint Pod (none by default).
	Tolerations []corev1.Toleration
	// ServiceAccountName is set when not empty; the API token is never mounted.
	ServiceAccountName string
	// ImagePullSecrets name Secrets in Namespace that pull Image (a private registry).
	ImagePullSecrets []corev1.LocalObjectReference
	// DriverVersion labels the pods; pods of another version are never shared.
	DriverVersion string
	// Labels and Annotations are added to every Mountpoint Pod (podcontract.ParseExtraMetadata
	// has refused the driver's own keys).
	Labels, Annotations map[string]string
	// CacheSizeLimit, when set, bounds the pod's /tmp volume (mount-s3's cache) and, through
	// the mounter's --max-cache-size-mib, mount-s3's cache below it (mountresources.CacheBudgetMiB,
	// already checked). Nil: unbounded.
	CacheSizeLimit *resource.Quantity
	// Resources are the mountpoint container's default requests and limits; a volume's
	// attributes override them (mountresources.Resolve).
	Resources corev1.ResourceRequirements
	// SecurityContext is added to every Mountpoint Pod's (podcontract.ParseSecurityContext
	// checked it); nil: the driver's alone.
	SecurityContext *podcontract.SecurityContext
}

// tmpVolume is the Mountpoint Pod's writable /tmp (its root filesystem is read-only).
const tmpVolume = "tmp"

// buildMountpointPod returns the Mountpoint Pod for key, named name, created on behalf of the
// workload pod with UID workloadUID. It runs scality-csi-mounter non-root with every capability
// dropped and a read-only root filesystem, pinned to the key's node by required node affinity
// (so the scheduler still checks the node's taints and resources), with a memory-backed emptyDir
// "comm" at /comm through which the node plugin hands over the FUSE mount, and an emptyDir
// "tmp" at /tmp, the one place it writes (mount-s3's cache directory, when the volume has
// `cache`). The container gets res (the defaults with the volume's overrides).
func buildMountpointPod(cfg MountpointPodConfig, key podcontract.Key, name, workloadUID string, res corev1.ResourceRequirements) *corev1.Pod {
	labels := maps.Clone(cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	annotations := maps.Clone(cfg.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[podcontract.AnnotationVolumeName] = key.PVName
	annotations[podcontract.AnnotationVolumeID] = key.VolumeID
	maps.Copy(labels, map[string]string{
		podcontract.LabelComponent:     podcontract.ComponentMountpoint,
		podcontract.LabelDriverVersion: podcontract.VersionLabel(cfg.DriverVersion),
		podcontract.LabelWorkloadUID:   podcontract.LabelValue(workloadUID),
	})
	if lv := podcontract.LabelValue(key.PVName); lv != "" {
		labels[podcontract.LabelVolumeName] = lv
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cfg.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			PriorityClassName:             cfg.PriorityClassName,
			ServiceAccountName:            cfg.ServiceAccountName,
			ImagePullSecrets:              cfg.ImagePullSecrets,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](600),
			Tolerations:                   cfg.Tolerations,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{key.NodeName},
						}},
					}},
				},
			}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](podcontract.MountpointUID),
				RunAsGroup:     ptr.To[int64](podcontract.MountpointUID),
				FSGroup:        ptr.To[int64](podcontract.MountpointUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "mountpoint",
				Image:           cfg.Image,
				ImagePullPolicy: cfg.ImagePullPolicy,
				Command:         cfg.Command,
				Resources:       res,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:             ptr.To(true),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					ReadOnlyRootFilesystem:   ptr.To(true),
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: podcontract.CommVolume, MountPath: podcontract.CommMountPath},
					{Name: tmpVolume, MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{{
				Name: podcontract.CommVolume,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium:    corev1.StorageMediumMemory,
					SizeLimit: ptr.To(resource.MustParse("10Mi")),
				}},
			}, {
				// On the node's disk, as the container's writable layer was, and bounded by
				// CacheSizeLimit when set: kubelet evicts a pod over its limit, which would end
				// the mount, so mount-s3's --max-cache-size stays below it (the mounter's
				// --max-cache-size-mib).
				Name:         tmpVolume,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}},
		},
	}
	if cfg.CacheSizeLimit != nil {
		pod.Spec.Volumes[1].EmptyDir.SizeLimit = ptr.To(cfg.CacheSizeLimit.DeepCopy())
		if mib, err := mountresources.CacheBudgetMiB(*cfg.CacheSizeLimit); err == nil {
			pod.Spec.Containers[0].Args = []string{fmt.Sprintf("--max-cache-size-mib=%d", mib)}
		}
	}
	cfg.SecurityContext.Apply(&pod.Spec)
	if labels[podcontract.LabelWorkloadUID] == "" {
		delete(pod.Labels, podcontract.LabelWorkloadUID)
	}
	return pod
}
