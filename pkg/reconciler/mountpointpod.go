package reconciler

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Labels and annotations on Mountpoint Pods. The needs-unmount and no-new-workload annotations
// are an interface with the node plugin and with operators.
const (
	LabelDriverVersion      = version.DriverName + "/mounted-by-csi-driver-version"
	LabelVolumeName         = version.DriverName + "/volume-name"
	LabelWorkloadUID        = version.DriverName + "/pod-uid"
	LabelComponent          = "app.kubernetes.io/component"
	ComponentMountpoint     = "mountpoint"
	AnnotationVolumeName    = version.DriverName + "/volume-name"
	AnnotationVolumeID      = version.DriverName + "/volume-id"
	AnnotationNeedsUnmount  = version.DriverName + "/needs-unmount"
	AnnotationNoNewWorkload = version.DriverName + "/no-new-workload"
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
	// DriverVersion labels the pods; pods of another version are never shared.
	DriverVersion string
}

// The mounter runs as this non-root user; the comm volume is group-owned by it.
const mountpointUID = 1000

var labelValueRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// labelValue returns v when it is a valid label value, "" otherwise.
func labelValue(v string) string {
	if len(v) <= validation.LabelValueMaxLength && labelValueRE.MatchString(v) {
		return v
	}
	return ""
}

// VersionLabel is the value of LabelDriverVersion for a driver version (sanitised to a valid
// label value).
func VersionLabel(v string) string {
	if lv := labelValue(v); lv != "" {
		return lv
	}
	return "invalid-version"
}

// buildMountpointPod returns the Mountpoint Pod for key, named name, created on behalf of the
// workload pod with UID workloadUID. It runs scality-csi-mounter non-root with every capability
// dropped, pinned to the key's node by required node affinity (so the scheduler still checks
// the node's taints and resources), with a memory-backed emptyDir "comm" at /comm through which
// the node plugin hands over the FUSE mount.
func buildMountpointPod(cfg MountpointPodConfig, key Key, name, workloadUID string) *corev1.Pod {
	labels := map[string]string{
		LabelComponent:     ComponentMountpoint,
		LabelDriverVersion: VersionLabel(cfg.DriverVersion),
		LabelWorkloadUID:   labelValue(workloadUID),
	}
	if lv := labelValue(key.PVName); lv != "" {
		labels[LabelVolumeName] = lv
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: cfg.Namespace,
			Labels:    labels,
			Annotations: map[string]string{
				AnnotationVolumeName: key.PVName,
				AnnotationVolumeID:   key.VolumeID,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			PriorityClassName:             cfg.PriorityClassName,
			ServiceAccountName:            cfg.ServiceAccountName,
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
				RunAsUser:      ptr.To[int64](mountpointUID),
				RunAsGroup:     ptr.To[int64](mountpointUID),
				FSGroup:        ptr.To[int64](mountpointUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "mountpoint",
				Image:           cfg.Image,
				ImagePullPolicy: cfg.ImagePullPolicy,
				Command:         cfg.Command,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:             ptr.To(true),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "comm", MountPath: "/comm"}},
			}},
			Volumes: []corev1.Volume{{
				Name: "comm",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium:    corev1.StorageMediumMemory,
					SizeLimit: ptr.To(resource.MustParse("10Mi")),
				}},
			}},
		},
	}
	if labels[LabelWorkloadUID] == "" {
		delete(pod.Labels, LabelWorkloadUID)
	}
	return pod
}
