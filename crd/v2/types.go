package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func metav1AddToGroupVersion(s *runtime.Scheme) { metav1.AddToGroupVersion(s, GroupVersion) }

// MountpointS3PodAttachment records, for one sharing key (node, PV, volume handle, mount options,
// workload fsGroup, authentication source), which Mountpoint Pods serve the volume on that node
// and which workload pods each of them serves. There is at most one per sharing key.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=s3pa
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="PV",type=string,JSONPath=`.spec.persistentVolumeName`
// +kubebuilder:printcolumn:name="Mount Options",type=string,JSONPath=`.spec.mountOptions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.persistentVolumeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.volumeID`
// +kubebuilder:selectablefield:JSONPath=`.spec.mountOptions`
// +kubebuilder:selectablefield:JSONPath=`.spec.workloadFSGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.authenticationSource`
type MountpointS3PodAttachment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MountpointS3PodAttachmentSpec `json:"spec"`
}

// MountpointS3PodAttachmentSpec is the sharing key plus the attachments.
type MountpointS3PodAttachmentSpec struct {
	// NodeName is the node the workloads and their Mountpoint Pods run on.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`
	// PersistentVolumeName is the PV mounted.
	// +kubebuilder:validation:MinLength=1
	PersistentVolumeName string `json:"persistentVolumeName"`
	// VolumeID is the PV's CSI volumeHandle.
	// +kubebuilder:validation:MinLength=1
	VolumeID string `json:"volumeID"`
	// MountOptions are the PV's mountOptions joined with commas ("" when none).
	// +optional
	MountOptions string `json:"mountOptions"`
	// WorkloadFSGroup is the workloads' pod fsGroup as a decimal string ("" when none).
	// +optional
	WorkloadFSGroup string `json:"workloadFSGroup"`
	// AuthenticationSource is the PV's authenticationSource: "driver" or "secret". It is absent
	// from the attachments of Scality's driver 2.x, whose sharing key has no such field; this
	// controller keeps such an attachment's workloads until they end, never adds one to it, and
	// always sets the field on its own.
	// +kubebuilder:validation:Enum=driver;secret
	// +optional
	AuthenticationSource string `json:"authenticationSource,omitempty"`
	// MountpointS3PodAttachments maps each Mountpoint Pod name (in the Mountpoint namespace) to
	// the workloads it serves.
	// +optional
	MountpointS3PodAttachments map[string][]WorkloadAttachment `json:"mountpointS3PodAttachments"`
}

// WorkloadAttachment is one workload pod served by a Mountpoint Pod.
type WorkloadAttachment struct {
	// WorkloadPodUID is the workload pod's metadata.uid.
	// +kubebuilder:validation:MinLength=1
	WorkloadPodUID string `json:"workloadPodUID"`
	// AttachmentTime is when the workload was attached.
	AttachmentTime metav1.Time `json:"attachmentTime"`
}

// MountpointS3PodAttachmentList is a list of MountpointS3PodAttachment.
//
// +kubebuilder:object:root=true
type MountpointS3PodAttachmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MountpointS3PodAttachment `json:"items"`
}
