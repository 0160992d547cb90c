package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// burst creates pods (n per claim) on one node per claim, from several goroutines at once, and
// calls midway (if not nil) when half of them exist.
func (e *env) burst(claims []string, perClaim int, midway func()) {
	e.t.Helper()
	type job struct {
		name, node, claim string
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var failed sync.Once
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := e.c.Create(context.Background(), podSpec(e.ns, j.name, j.node, nil, j.claim)); err != nil {
					failed.Do(func() { e.t.Errorf("create %s: %v", j.name, err) })
				}
			}
		}()
	}
	total := len(claims) * perClaim
	for i := 0; i < total; i++ {
		// Round-robin over claims: every attachment keeps receiving workloads during the burst.
		c := i % len(claims)
		jobs <- job{name: fmt.Sprintf("b%d", i), node: e.node(c % 5), claim: claims[c]}
		if i == total/2 && midway != nil {
			midway()
		}
	}
	close(jobs)
	wg.Wait()
}

// expectExactly waits for one attachment per claim with perClaim workloads each and one
// Mountpoint Pod per attachment, then checks nothing more appears.
func (e *env) expectExactly(claims, perClaim int) {
	e.t.Helper()
	check := func() string {
		atts := e.attachments()
		if len(atts) != claims {
			return fmt.Sprintf("%d attachments, want %d", len(atts), claims)
		}
		for _, a := range atts {
			if len(a.Spec.MountpointS3PodAttachments) != 1 {
				return fmt.Sprintf("attachment %s names %d Mountpoint Pods, want 1", a.Name, len(a.Spec.MountpointS3PodAttachments))
			}
			for _, ws := range a.Spec.MountpointS3PodAttachments {
				if len(ws) != perClaim {
					return fmt.Sprintf("attachment %s records %d workloads, want %d", a.Name, len(ws), perClaim)
				}
			}
		}
		if n := len(e.activeMountpointPods(atts)); n != claims {
			return fmt.Sprintf("%d Mountpoint Pods, want %d", n, claims)
		}
		return ""
	}
	harness.Eventually(e.t, 60*time.Second, check)
	consistently(e.t, 2*time.Second, check)
}

func (e *env) claims(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		_, c := e.volume(fmt.Sprintf("v%d", i), volumeOpts{})
		out = append(out, c)
	}
	return out
}

func TestTwoControllersAtOnceCreateNoDuplicates(t *testing.T) {
	e := newEnv(t) // leader election off: both replicas reconcile everything
	e.startController()
	claims := e.claims(10)
	e.burst(claims, 10, nil)
	e.expectExactly(10, 10)
}

func TestLeaderElectionTwoReplicas(t *testing.T) {
	e := newEnv(t)
	e.ctrl.Stop()
	for i := 0; i < 2; i++ {
		harness.StartController(t, kube, harness.ControllerOptions{LeaderElect: true, ExtraArgs: []string{"--batch-window=200ms", "--leader-election-id=le-" + e.id}})
	}
	claims := e.claims(5)
	e.burst(claims, 6, nil)
	e.expectExactly(5, 6)
}

// activeMountpointPods returns the Mountpoint Pods that serve workloads: those an attachment
// names, and any other that is not being retired (an orphan awaiting retirement counts too, so
// a duplicate that escaped retirement is caught).
func (e *env) activeMountpointPods(atts []crdv2.MountpointS3PodAttachment) []string {
	named := map[string]bool{}
	for _, a := range atts {
		for mp := range a.Spec.MountpointS3PodAttachments {
			named[mp] = true
		}
	}
	var out []string
	for _, p := range e.mountpointPods() {
		if named[p.Name] || p.Annotations[podcontract.AnnotationNeedsUnmount] == "" {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestControllerRestartMidBurst: a controller killed mid-burst and restarted ends with one
// attachment and one serving Mountpoint Pod per volume. A Mountpoint Pod created just before the
// kill but not yet recorded in an attachment is an orphan: it must be retired (marked
// needs-unmount) once older than the orphan grace, never left serving.
func TestControllerRestartMidBurst(t *testing.T) {
	e := newEnv(t, "--orphan-grace=3s")
	claims := e.claims(20)
	e.burst(claims, 10, func() {
		e.ctrl.Kill()
		e.ctrl.Start()
	})
	e.expectExactly(20, 10)
}
