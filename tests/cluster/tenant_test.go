package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// testTenantIsolation, in one mode, with the chart's default --node-publish-secret-scope
// (claim): namespace B's pod, whose claim is bound to a PV naming namespace A's Secret, does not
// start; kubelet's FailedMount event carries the node plugin's PermissionDenied naming both
// namespaces, and nothing of the volume is mounted on the node. The same PV with
// nodePublishSecretScope: any mounts.
func testTenantIsolation(t *testing.T, mode string) {
	setMode(t, mode)
	ctx := context.Background()
	nsA, nsB := newNamespace(t, "tenant-a-"+mode), newNamespace(t, "tenant-b-"+mode)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: nsA},
		StringData: map[string]string{"access_key_id": rig.S3AccessKey, "secret_access_key": rig.S3SecretKey}}
	harness.Must(t, env.c.Create(ctx, secret))
	bucket := "tenant-" + mode + "-" + suffix()
	env.s3.CreateBucket(t, bucket)
	ref := &corev1.SecretReference{Name: "s3-creds", Namespace: nsA}

	state := func() []string {
		var all []string
		for _, pattern := range []string{
			filepath.Join(rig.KubeletDir, "plugins", driverName, "systemd", "*"),
			filepath.Join("/run", driverName, "*"),
			filepath.Join(rig.KubeletDir, "pods", "*", "volumes", "kubernetes.io~empty-dir", "comm", "credentials", "credentials"),
		} {
			files, _ := filepath.Glob(pattern)
			all = append(all, files...)
		}
		return all
	}
	before := state()
	claim := staticVolume(t, nsB, "stolen", bucket, volumeOpts{attributes: map[string]string{"authenticationSource": "secret"}, secretRef: ref})
	thief := workload(t, nsB, "thief", claim, podOpts{})
	var refusal string
	harness.Eventually(t, 2*time.Minute, func() string {
		for _, e := range eventsOn(t, nsB, thief.Name) {
			if e.Reason == "FailedMount" && strings.Contains(e.Message, "PermissionDenied") {
				refusal = e.Message
				return ""
			}
		}
		return "no FailedMount event with PermissionDenied on " + thief.Name + " yet: " + podEvents(thief)
	})
	for _, want := range []string{"node-publish secret " + nsA + "/s3-creds, in namespace " + nsA, "its claim " + nsB + "/stolen is in namespace " + nsB} {
		if !strings.Contains(refusal, want) {
			t.Errorf("refusal %q lacks %q", refusal, want)
		}
	}
	if strings.Contains(refusal, rig.S3SecretKey) {
		t.Error("the Event shows the secret")
	}
	var cur corev1.Pod
	harness.Must(t, env.c.Get(ctx, client.ObjectKeyFromObject(thief), &cur))
	if cur.Status.Phase == corev1.PodRunning {
		t.Errorf("pod %s/%s runs with namespace %s's credentials", nsB, thief.Name, nsA)
	}
	table, err := os.ReadFile("/proc/self/mountinfo")
	harness.Must(t, err)
	pvName := nsB + "-stolen"
	for _, line := range strings.Split(string(table), "\n") {
		if strings.Contains(line, pvName) || strings.Contains(line, bucket) {
			t.Errorf("a mount of the refused volume is on the node: %s", line)
		}
	}
	if after := state(); !slices.Equal(before, after) {
		t.Errorf("the refused publish left state or credentials on the node: before %v, after %v", before, after)
	}

	// The PV's author allows the Secret of another namespace explicitly.
	allowed := staticVolume(t, nsB, "shared", bucket, volumeOpts{
		attributes: map[string]string{"authenticationSource": "secret", "nodePublishSecretScope": "any"}, secretRef: ref})
	waitRunning(t, 2*time.Minute, workload(t, nsB, "allowed", allowed, podOpts{}))
}
