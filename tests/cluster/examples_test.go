package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// example is one file of docs/examples and what must exist before it is applied, unchanged.
type example struct {
	file       string
	mode       string            // the node's mode
	namespaces []string          // where its pods (label app=s3-example) run
	buckets    []string          // created first (static volumes name existing buckets)
	objects    map[string]string // bucket/key → content, put first
	users      [][2]string       // S3 users with the example Secrets' keys
	written    []string          // bucket/key the pods write ("" bucket: the dynamic volume's)
	logs       map[string]string // namespace/pod → text its log must hold
	wantUnit   bool              // a mount-s3 unit serves it (systemd mode)
	wantMPPod  bool              // a Mountpoint Pod serves it (pod mode)
}

var examples = []example{
	{file: "static-systemd.yaml", mode: "systemd", namespaces: []string{"s3-example-static-systemd"}, buckets: []string{"example-static-systemd"},
		written: []string{"example-static-systemd/hello-from-systemd.txt"}, wantUnit: true},
	{file: "static-pod.yaml", mode: "pod", namespaces: []string{"s3-example-static-pod"}, buckets: []string{"example-static-pod"},
		written: []string{"example-static-pod/hello-from-pod.txt"}, wantMPPod: true},
	{file: "read-only.yaml", mode: "pod", namespaces: []string{"s3-example-read-only"}, buckets: []string{"example-read-only"},
		objects: map[string]string{"example-read-only/README.txt": "read me, do not write me\n"},
		logs:    map[string]string{"s3-example-read-only/reader": "read me, do not write me\nREAD-ONLY"}, wantMPPod: true},
	{file: "fsgroup.yaml", mode: "systemd", namespaces: []string{"s3-example-fsgroup"}, buckets: []string{"example-fsgroup"},
		written: []string{"example-fsgroup/by-uid-1000.txt"}, wantUnit: true},
	{file: "host-to-container.yaml", mode: "systemd", namespaces: []string{"s3-example-host-to-container"}, buckets: []string{"example-host-to-container"},
		wantUnit: true},
	{file: "dynamic.yaml", mode: "pod", namespaces: []string{"s3-example-dynamic"}, written: []string{"/hello-dynamic.txt"}, wantMPPod: true},
	{file: "per-volume-secret.yaml", mode: "systemd", namespaces: []string{"s3-example-secret"}, buckets: []string{"example-secret"},
		users: [][2]string{{"EXAMPLEVOLUMEKEY0001", "example-volume-secret-0001"}}, written: []string{"example-secret/hello-secret.txt"}, wantUnit: true},
	{file: "multi-tenant.yaml", mode: "pod", namespaces: []string{"s3-example-team-a", "s3-example-team-b"}, buckets: []string{"example-team-a", "example-team-b"},
		users:   [][2]string{{"EXAMPLETEAMAKEY00001", "example-team-a-secret-1"}, {"EXAMPLETEAMBKEY00001", "example-team-b-secret-1"}},
		written: []string{"example-team-a/hello-team-a.txt", "example-team-b/hello-team-b.txt"}, wantMPPod: true},
}

// testExamples applies every file of docs/examples as it is (kubectl apply -f), on a node in
// the mode the example is for, after creating what it says must exist (buckets, and S3 users
// holding the example Secrets' placeholder keys); checks that its pods run and do what the
// file says (files in the bucket, log lines), in the mode it says; then deletes it (kubectl
// delete -f) and checks that nothing is left on the node.
func testExamples(t *testing.T) {
	dir := filepath.Join(harness.RepoRoot(), "docs", "examples")
	users := map[string]bool{}
	for _, ex := range examples {
		t.Run(strings.TrimSuffix(ex.file, ".yaml"), func(t *testing.T) {
			expectClean(t)
			setMode(t, ex.mode)
			for _, b := range ex.buckets {
				env.s3.CreateBucket(t, b)
			}
			for path, body := range ex.objects {
				bucket, key, _ := strings.Cut(path, "/")
				env.s3.PutObject(t, bucket, key, []byte(body))
			}
			for _, u := range ex.users {
				if !users[u[0]] {
					env.s3.CreateUser(t, u[0], u[1], "admin")
					users[u[0]] = true
				}
			}
			file := filepath.Join(dir, ex.file)
			mustRun(t)(kubectl(t, "apply", "-f", file))
			deleted := false
			remove := func() {
				if !deleted {
					deleted = true
					mustRun(t)(kubectl(t, "delete", "-f", file, "--wait=true", "--timeout=3m"))
				}
			}
			t.Cleanup(func() {
				if !deleted {
					_, _ = kubectl(t, "delete", "-f", file, "--wait=true", "--timeout=3m")
				}
			})
			var pods []*corev1.Pod
			for _, ns := range ex.namespaces {
				harness.Eventually(t, time.Minute, func() string {
					var list corev1.PodList
					harness.Must(t, env.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{"app": "s3-example"}))
					if len(list.Items) == 0 {
						return "no pod labelled app=s3-example in " + ns
					}
					for i := range list.Items {
						pods = append(pods, &list.Items[i])
					}
					return ""
				})
			}
			// 6 min: a file applies claim and pod together, and a pod the scheduler parked on the
			// claim before it bound may wait for the scheduler's 5-minute flush (see waitBound).
			waitRunning(t, 6*time.Minute, pods...)
			for _, path := range ex.written {
				bucket, key, _ := strings.Cut(path, "/")
				if bucket == "" {
					bucket = dynamicBucket(t, ex.namespaces[0], "data")
				}
				harness.Eventually(t, time.Minute, func() string {
					if !env.s3.ObjectExists(t, bucket, key) {
						return fmt.Sprintf("%s/%s not in the bucket", bucket, key)
					}
					return ""
				})
			}
			if ex.file == "host-to-container.yaml" {
				harness.Eventually(t, time.Minute, func() string {
					if len(env.s3.ListKeys(t, ex.buckets[0])) == 0 {
						return "the Deployment wrote nothing"
					}
					return ""
				})
			}
			for pod, want := range ex.logs {
				ns, name, _ := strings.Cut(pod, "/")
				harness.Eventually(t, time.Minute, func() string {
					out, _ := kubectl(t, "-n", ns, "logs", name)
					if !strings.Contains(out, want) {
						return fmt.Sprintf("log of %s lacks %q:\n%s", pod, want, out)
					}
					return ""
				})
			}
			st := currentState(t)
			if ex.wantUnit && len(st.units) == 0 || ex.wantMPPod && len(st.mpPods) == 0 {
				t.Errorf("%s mode did not serve it: %s", ex.mode, st)
			}
			var bucket string
			if ex.file == "dynamic.yaml" {
				bucket = dynamicBucket(t, ex.namespaces[0], "data")
			}
			remove()
			expectClean(t)
			if bucket != "" {
				harness.Eventually(t, 2*time.Minute, func() string {
					for _, b := range env.s3.ListBuckets(t) {
						if b == bucket {
							return "the dynamic volume's bucket outlived its claim (bucketDeletionPolicy deleteWithObjects)"
						}
					}
					return ""
				})
			}
		})
	}
}

// dynamicBucket returns the bucket of a provisioned claim's volume (the last field of its
// volume handle).
func dynamicBucket(t *testing.T, ns, claim string) string {
	t.Helper()
	var pvc corev1.PersistentVolumeClaim
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: claim}, &pvc))
	var pv corev1.PersistentVolume
	harness.Must(t, env.c.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv))
	h := pv.Spec.CSI.VolumeHandle
	return h[strings.LastIndex(h, ":")+1:]
}
