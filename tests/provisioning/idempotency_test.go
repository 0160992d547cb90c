package provisioning

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestCreateVolumeRetried: a retried CreateVolume (the provisioner lost the answer) returns the
// same volume and never makes a second bucket; so does a retry after a controller restart.
func TestCreateVolumeRetried(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	req := createReq("pvc-retried", map[string]string{"bucketNamePrefix": "k8s-"}, nil)
	first := e.mustCreate(req)
	for i := 0; i < 3; i++ {
		again := e.mustCreate(req)
		if d := cmp.Diff(first, again, protocmp.Transform()); d != "" {
			t.Fatalf("retry %d returned another volume (-first +retry):\n%s", i+1, d)
		}
	}
	e.ctrl.Stop()
	e.ctrl.Start()
	var again *csi.Volume
	waitFor(t, func() bool {
		var err error
		again, err = e.create(req)
		return err == nil
	})
	if d := cmp.Diff(first, again, protocmp.Transform()); d != "" {
		t.Fatalf("retry after a restart returned another volume (-first +retry):\n%s", d)
	}
	e.expectBuckets("k8s-pvc-retried")
	e.mustDelete(first.GetVolumeId(), nil)
	e.expectBuckets()
}

// TestCreateVolumeConcurrent: many CreateVolume calls with one name, on one controller and on
// two controller replicas at once, make exactly one bucket and one volume. Calls that find the
// volume busy get Aborted (and succeed when retried, as the provisioner does).
func TestCreateVolumeConcurrent(t *testing.T) {
	e := newEnv(t, harness.S3Options{})
	replica := harness.StartControllerPlugin(t, harness.ControllerPluginOptions{S3: e.s3, WithCredentials: true})
	clients := []csi.ControllerClient{e.ctrl.Controller, replica.Controller}

	for _, name := range []string{"pvc-concurrent-1", "pvc-concurrent-2", "pvc-concurrent-3"} {
		const callers = 8
		var wg sync.WaitGroup
		ids := make([]string, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c := clients[i%len(clients)]
				for {
					ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
					resp, err := c.CreateVolume(ctx, createReq(name, nil, e.rootSecrets()))
					cancel()
					if status.Code(err) == codes.Aborted {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					ids[i], errs[i] = resp.GetVolume().GetVolumeId(), err
					return
				}
			}()
		}
		close(start)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("%s: caller %d: %v", name, i, errs[i])
			}
			if ids[i] != "v1:delete:"+name {
				t.Fatalf("%s: caller %d got volume %q", name, i, ids[i])
			}
		}
	}
	e.expectBuckets("pvc-concurrent-1", "pvc-concurrent-2", "pvc-concurrent-3")

	// Concurrent deletes from both replicas: one deletes, the others find it gone.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for {
				ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
				_, err := c.DeleteVolume(ctx, deleteReq("v1:delete:pvc-concurrent-1", nil))
				cancel()
				if status.Code(err) == codes.Aborted {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("concurrent DeleteVolume: %v", err)
				}
				return
			}
		}()
	}
	wg.Wait()
	e.expectBuckets("pvc-concurrent-2", "pvc-concurrent-3")
}

// waitFor polls cond for up to 20 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
