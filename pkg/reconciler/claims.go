package reconciler

import corev1 "k8s.io/api/core/v1"

// claimNames returns the names of the PersistentVolumeClaims pod's volumes use, in volume order,
// without duplicates: a persistentVolumeClaim volume names its claim; a generic ephemeral volume
// (volumes[].ephemeral) uses the claim Kubernetes creates for it, named <pod>-<volume>.
func claimNames(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		var name string
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			name = pod.Name + "-" + v.Name
		default:
			continue
		}
		if !contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
