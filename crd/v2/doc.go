// Package v2 holds the API types of the s3.csi.scality.com/v2 group: MountpointS3PodAttachment,
// the cluster-scoped record of which workload pods on a node share which Mountpoint Pod for a
// volume. The controller writes it; node plugins read it.
//
// The CRD YAML in crd/ and zz_generated.deepcopy.go are generated from these types by
// controller-gen (make generate); `make verify` fails when they drift.
//
// +kubebuilder:object:generate=true
// +groupName=s3.csi.scality.com
package v2
