package scality

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// MountpointPod says how to play one of 2.x's Mountpoint Pods.
type MountpointPod struct {
	Name, Node, WorkloadUID, PV string
	// Image and Command of the container. 2.x runs its own image with
	// /bin/scality-s3-csi-mounter; where that image is not at hand, a mounter that speaks the
	// same protocol (SOURCES.md §2.x hand-over) stands in.
	Image, Command string
	// CAConfigMap: 2.2.0's tls.caCertConfigMap ("" for none, and always before 2.2.0), read by
	// an init container from InitImage running InitCommand.
	CAConfigMap, InitImage string
	InitCommand            []string
}

// Pod is the Mountpoint Pod 2.x's controller creates
// (scality/mountpoint-s3-csi-driver@2.0.0..2.2.0:pkg/podmounter/mppod/creator.go, Create and
// 2.2.0's configureTLS): its four labels and no annotation; restartPolicy OnFailure; priority
// class mount-s3-critical; required node affinity on metadata.name; every taint tolerated; from
// 2.1.1 the pod's fsGroup 1000 (none in 2.0.0); one container "mountpoint" as uid 1000, non-root,
// without privilege escalation or capabilities, RuntimeDefault seccomp, the comm emptyDir
// (Memory, 10Mi) at /comm; no resources, no service account of its own. With a CA (2.2.0): an
// init container install-ca-cert (requests 10m/16Mi, limit 64Mi, the same security context)
// that reads the ConfigMap (key ca-bundle.crt, not optional) at /custom-ca and writes the
// bundle into an emptyDir (2Mi) the container mounts read-only at /etc/ssl/certs.
func (m MountpointPod) Pod(r Release) *corev1.Pod {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		RunAsUser:                ptr.To[int64](1000),
		RunAsNonRoot:             ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: MountpointNamespace, Labels: MountpointPodLabels(r, m.WorkloadUID, m.PV)},
		Spec: corev1.PodSpec{
			RestartPolicy:     corev1.RestartPolicyOnFailure,
			PriorityClassName: "mount-s3-critical",
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{m.Node}}}}}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "mountpoint", Image: m.Image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{m.Command},
				SecurityContext: sc,
				VolumeMounts:    []corev1.VolumeMount{{Name: "comm", MountPath: "/comm"}},
			}},
			Volumes: []corev1.Volume{{Name: "comm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("10Mi"))}}}},
		},
	}
	if r.MountpointPodFSGroup() {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)}
	}
	if r.TLS() && m.CAConfigMap != "" {
		p.Spec.InitContainers = []corev1.Container{{
			Name: "install-ca-cert", Image: m.InitImage, ImagePullPolicy: corev1.PullIfNotPresent, Command: m.InitCommand,
			SecurityContext: sc,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "custom-ca-cert", MountPath: "/custom-ca", ReadOnly: true}, {Name: "etc-ssl-certs", MountPath: "/shared-certs"}},
		}}
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "etc-ssl-certs", MountPath: "/etc/ssl/certs", ReadOnly: true})
		p.Spec.Volumes = append(p.Spec.Volumes,
			corev1.Volume{Name: "custom-ca-cert", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: m.CAConfigMap},
				Items:                []corev1.KeyToPath{{Key: "ca-bundle.crt", Path: "ca-bundle.crt"}}}}},
			corev1.Volume{Name: "etc-ssl-certs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Mi"))}}})
	}
	return p
}

// Workload is one entry of an attachment: a workload pod's UID and when it was attached.
type Workload struct {
	UID  string
	Time time.Time
}

// Attachment is the MountpointS3PodAttachment 2.x's controller makes for workloads of a PV on
// a node (scality/mountpoint-s3-csi-driver@2.0.0..2.2.0:cmd/scality-csi-controller/
// csicontroller/reconciler.go, createS3PodAttachmentWithMPPod): generateName s3pa-; spec
// nodeName, persistentVolumeName, volumeID (the PV's volume handle), mountOptions (the PV's
// mountOptions joined with ","), workloadFSGroup (the workload's fsGroup in decimal, or ""), and
// the map from Mountpoint Pod to workloads (UTC times); no authenticationSource; from 2.2.0 the
// driver-version label.
func Attachment(r Release, node, pv, volumeID string, mountOptions []string, fsGroup, mountpointPod string, workloads ...Workload) *unstructured.Unstructured {
	var ws []any
	for _, w := range workloads {
		ws = append(ws, map[string]any{"workloadPodUID": w.UID, "attachmentTime": w.Time.UTC().Format(time.RFC3339)})
	}
	meta := map[string]any{"generateName": "s3pa-"}
	if r.AttachmentLabelled() {
		meta["labels"] = map[string]any{"s3.csi.scality.com/mounted-by-csi-driver-version": r.DriverVersion()}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "s3.csi.scality.com/v2", "kind": "MountpointS3PodAttachment", "metadata": meta,
		"spec": map[string]any{"nodeName": node, "persistentVolumeName": pv, "volumeID": volumeID,
			"mountOptions": strings.Join(mountOptions, ","), "workloadFSGroup": fsGroup,
			"mountpointS3PodAttachments": map[string]any{mountpointPod: ws}},
	}}
}
