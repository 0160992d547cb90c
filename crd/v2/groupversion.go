package v2

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "s3.csi.scality.com", Version: "v2"}

// SchemeBuilder registers the types of this package.
var SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MountpointS3PodAttachment{}, &MountpointS3PodAttachmentList{})
	metav1AddToGroupVersion(s)
	return nil
})

// AddToScheme adds the types of this package to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme
