package mixed

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestSecretScope runs the node plugin with --node-publish-secret-scope=claim against a real
// API server and publishes, with a node-publish secret, volumes whose PVs name a Secret: in the
// claim's namespace (mounted), in another namespace (PermissionDenied naming both namespaces,
// and nothing mounted, no unit, no state left), in another namespace with
// nodePublishSecretScope: any (mounted), and a PV bound to another namespace's claim published
// for a pod of this one (refused).
func TestSecretScope(t *testing.T) {
	c := newCluster(t)
	n := c.node("scope", nodeOpts{label: "systemd", noKubelet: true, args: []string{"--node-publish-secret-scope=claim"}})
	secretIn := func(ns string, attrs map[string]string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			pv.Spec.CSI.VolumeAttributes["authenticationSource"] = "secret"
			for k, v := range attrs {
				pv.Spec.CSI.VolumeAttributes[k] = v
			}
			pv.Spec.CSI.NodePublishSecretRef = &corev1.SecretReference{Name: "s3-creds", Namespace: ns}
		}
	}
	publish := func(name string, pv *corev1.PersistentVolume) (string, error) {
		t.Helper()
		w := n.workload(name, pv)
		req := n.publishReq(w, pv, c.s3.SecretKey)
		req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = c.ns
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := n.drv.Node.NodePublishVolume(ctx, req)
		return req.TargetPath, err
	}
	bucket := "scope-" + c.id
	c.s3.CreateBucket(t, bucket)

	// A Secret of the claim's namespace, and one allowed elsewhere explicitly: mounted.
	for name, change := range map[string]func(*corev1.PersistentVolume){
		"own":     secretIn(c.ns, nil),
		"allowed": secretIn("storage", map[string]string{"nodePublishSecretScope": "any"}),
	} {
		target, err := publish(name, c.volumeWith(name, bucket, change))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n.modeOf(target) != "systemd" || n.unitOf(target) == "" {
			t.Errorf("%s: %s is not mounted by a unit", name, target)
		}
		n.unpublish(target)
	}

	// Another namespace's Secret; a claim of another namespace.
	refusals := map[string]struct {
		change func(*corev1.PersistentVolume)
		want   []string
	}{
		"foreign": {secretIn("team-a", nil), []string{"node-publish secret team-a/s3-creds, in namespace team-a", "is in namespace " + c.ns, "nodePublishSecretScope: any"}},
		"rebound": {func(pv *corev1.PersistentVolume) {
			secretIn("team-a", nil)(pv)
			pv.Spec.ClaimRef.Namespace = "team-a"
		}, []string{"bound to claim team-a/rebound, not to a claim of the workload's namespace " + c.ns}},
	}
	for name, r := range refusals {
		target, err := publish(name, c.volumeWith(name, bucket, r.change))
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", name, err)
			continue
		}
		for _, w := range r.want {
			if !strings.Contains(status.Convert(err).Message(), w) {
				t.Errorf("%s: %q lacks %q", name, status.Convert(err).Message(), w)
			}
		}
		if strings.Contains(err.Error(), c.s3.SecretKey) {
			t.Errorf("%s: the error shows the secret", name)
		}
		if n.modeOf(target) != "" || n.unitOf(target) != "" {
			t.Errorf("%s: something is mounted at %s after the refusal", name, target)
		}
		table, terr := os.ReadFile("/proc/self/mountinfo")
		harness.Must(t, terr)
		for _, line := range strings.Split(string(table), "\n") {
			if strings.Contains(line, n.kubelet) && strings.Contains(line, c.ns+"-"+name) {
				t.Errorf("%s: a mount is left: %s", name, line)
			}
		}
		if _, err := os.Stat(target); err == nil {
			entries, _ := os.ReadDir(target)
			if len(entries) > 0 {
				t.Errorf("%s: %s holds %d entries", name, target, len(entries))
			}
		}
	}
	if strings.Contains(n.drv.Log(), c.s3.SecretKey) {
		t.Error("the node plugin's log shows the secret")
	}
}
