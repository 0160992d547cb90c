package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
	"github.com/s3csi/s3-csi-driver/pkg/mountoptions"
)

const (
	guard = "tmpfs:s3csi-guard" // an earlier release's
	bind  = "fuse:mountpoint-s3"
)

func request(t *testing.T, target, workload string) mounter.Request {
	t.Helper()
	built, err := mountargs.Build(mountargs.Options{MountFlags: []string{"allow-delete"}, UserAgentPrefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return mounter.Request{VolumeID: "vol-1", PVName: "pv-1", WorkloadPodUID: workload, Bucket: "bucket-1", Target: target,
		Args: built.Args, Env: []string{"AWS_REGION=us-east-1"},
		Credentials: &credentials.Credentials{AccessKeyID: "AKIDFAKE", SecretAccessKey: "s3cr3t-value"}}
}

// stack renders the mounts at path without device numbers: bind, guard.
func (r *rig) stack(path string) []string {
	var out []string
	for _, m := range r.k.at(path) {
		out = append(out, m[:strings.LastIndex(m, ":")])
	}
	return out
}

func TestMountFirstWorkloadHandsOverThenBinds(t *testing.T) {
	r := newRig(t)
	pod := r.mountpointPod("mp-a", "w1")
	target := r.target("w1")
	if err := r.m.Mount(context.Background(), request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	source := r.m.paths.source("mp-a")
	want := []string{
		"fuse " + source + " ro=false",
		"bind " + source + " " + target + " ro=false",
		"bind " + source + " " + target + " ro=false",
	}
	if diff := cmp.Diff(want, r.k.took()); diff != "" {
		t.Errorf("kernel calls (-want +got):\n%s", diff)
	}
	if got := r.stack(target); !slices.Equal(got, []string{bind, bind}) {
		t.Errorf("target stack = %v, want two binds", got)
	}
	sends := r.sends()
	if len(sends) != 1 {
		t.Fatalf("%d hand-overs, want 1", len(sends))
	}
	comm := r.m.paths.comm(pod.UID)
	if sends[0].socket != filepath.Join(comm, mountoptions.SocketName) || sends[0].opts.BucketName != "bucket-1" {
		t.Errorf("hand-over = %+v", sends[0])
	}
	env := strings.Join(sends[0].opts.Env, " ")
	for _, want := range []string{"AWS_REGION=us-east-1", "AWS_SHARED_CREDENTIALS_FILE=/comm/credentials/", "AWS_PROFILE="} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
	if strings.Contains(env+strings.Join(sends[0].opts.Args, " "), "s3cr3t") {
		t.Error("the secret went into the hand-over message")
	}
	// The secret is in the comm directory's credentials, never in the node's records.
	creds, err := os.ReadFile(filepath.Join(comm, commCredentials, credentials.CredentialsFileName))
	if err != nil || !strings.Contains(string(creds), "s3cr3t-value") {
		t.Errorf("credentials file: %q %v", creds, err)
	}
	for _, rec := range []string{r.m.paths.sourceRecord("mp-a"), r.m.paths.targetRecord(target)} {
		b, err := os.ReadFile(rec)
		if err != nil || strings.Contains(string(b), "s3cr3t") {
			t.Errorf("record %s: %q %v", rec, b, err)
		}
	}
	if got := r.m.Targets(); len(got) != 1 || got[0].Path != target || got[0].VolumeID != "vol-1" {
		t.Errorf("Targets = %+v", got)
	}
}

func TestMountSecondWorkloadOnlyBinds(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1", "w2")
	ctx := context.Background()
	if err := r.m.Mount(ctx, request(t, r.target("w1"), "w1")); err != nil {
		t.Fatal(err)
	}
	r.k.took()
	t2 := r.target("w2")
	if err := r.m.Mount(ctx, request(t, t2, "w2")); err != nil {
		t.Fatal(err)
	}
	source := r.m.paths.source("mp-a")
	if diff := cmp.Diff([]string{"bind " + source + " " + t2 + " ro=false", "bind " + source + " " + t2 + " ro=false"}, r.k.took()); diff != "" {
		t.Errorf("kernel calls (-want +got):\n%s", diff)
	}
	if n := len(r.sends()); n != 1 {
		t.Errorf("%d hand-overs, want 1 (the mount is shared)", n)
	}
	// Republish of a live target changes nothing but the record.
	if err := r.m.Mount(ctx, request(t, t2, "w2")); err != nil {
		t.Fatal(err)
	}
	if calls := r.k.took(); len(calls) != 0 {
		t.Errorf("republish of a live target made kernel calls %v", calls)
	}
}

func TestMountReadOnlyVolumeAndWorkload(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	req := request(t, r.target("w1"), "w1")
	req.ReadOnly = true
	req.Args.Set("read-only", "")
	if err := r.m.Mount(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	calls := r.k.took()
	// One workload's read-only publish: the shared mount stays writable, the bind is read-only.
	if !slices.Contains(calls, "fuse "+r.m.paths.source("mp-a")+" ro=false") || !slices.Contains(calls, "bind "+r.m.paths.source("mp-a")+" "+req.Target+" ro=true") {
		t.Errorf("kernel calls = %v", calls)
	}
	if args := strings.Join(r.sends()[0].opts.Args, " "); strings.Contains(args, "read-only") {
		t.Errorf("shared mount args %q are read-only for a read-only publish", args)
	}
}

func TestMountDeadSourceIsHandedOverAgain(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	ctx := context.Background()
	target := r.target("w1")
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	source := r.m.paths.source("mp-a")
	r.k.kill(source)
	r.k.took()
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"unmount " + source + " abort", // the dead connection is aborted, never waited on
		"fuse " + source + " ro=false",
		"bind " + source + " " + target + " ro=false", // on top of the dead binds
		"bind " + source + " " + target + " ro=false",
	}
	if diff := cmp.Diff(want, r.k.took()); diff != "" {
		t.Errorf("kernel calls (-want +got):\n%s", diff)
	}
	if n := len(r.sends()); n != 2 {
		t.Errorf("%d hand-overs, want 2", n)
	}
	if got := r.stack(target); !slices.Equal(got, []string{bind, bind, bind, bind}) {
		t.Errorf("target stack = %v", got)
	}
	res, err := r.m.health.Check(ctx, target)
	if err != nil || res.State.String() != "live" {
		t.Errorf("target after repair: %v %v", res.State, err)
	}
}

func TestMountRefusesTargetOfAnotherVolume(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	r.mountpointPod("mp-b", "w2")
	ctx := context.Background()
	target := r.target("w1")
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	// w2's volume asked for w1's target (a kubelet bug or a hostile request).
	req := request(t, target, "w2")
	req.VolumeID = "vol-2"
	err := r.m.Mount(ctx, req)
	if !errors.Is(err, mounter.ErrTargetInUse) || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), `"vol-1"`) {
		t.Fatalf("err = %v, want ErrTargetInUse naming the target and the volume holding it", err)
	}
}

func TestMountRefusesForeignMount(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	target := r.target("w1")
	r.k.mu.Lock()
	r.k.add(fakeMount{minor: 7, point: target, fsType: "ext4", source: "/dev/sdb"})
	r.k.mu.Unlock()
	err := r.m.Mount(context.Background(), request(t, target, "w1"))
	if !errors.Is(err, mounter.ErrTargetInUse) || !strings.Contains(err.Error(), "/dev/sdb") {
		t.Fatalf("err = %v, want ErrTargetInUse naming the foreign mount", err)
	}
}

func TestMountFailedHandOverIsUndone(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	r.sendErr = errors.New("connection refused")
	target := r.target("w1")
	err := r.m.Mount(context.Background(), request(t, target, "w1"))
	if err == nil || !strings.Contains(err.Error(), "mp-a") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want the hand-over failure naming the Mountpoint Pod", err)
	}
	source := r.m.paths.source("mp-a")
	if got := r.k.at(source); len(got) != 0 {
		t.Errorf("source still mounted: %v", got)
	}
	if _, err := os.Stat(source); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("source directory left: %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target created: %v", err)
	}
}

func TestMountReportsMountErr(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	// The Mountpoint Pod's mount-s3 fails: it writes mount.err and the mount never answers.
	r.onSend = func(comm string) {
		tmp := filepath.Join(comm, ".err")
		// An object name or S3's answer in the text may carry terminal escapes and newlines.
		if err := os.WriteFile(tmp, []byte("Error: Failed to create S3 client: bucket bucket-1 does not exist\n\x1b[2Jcaused by: \u202eoops\n"), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, filepath.Join(comm, mountoptions.ErrorFileName)); err != nil {
			t.Error(err)
		}
	}
	never := make(chan struct{})
	defer close(never)
	r.k.answers = func(string) error { <-never; return nil }
	target := r.target("w1")
	err := r.m.Mount(context.Background(), request(t, target, "w1"))
	if !errors.Is(err, mounter.ErrMountFailed) || !strings.Contains(err.Error(), "bucket bucket-1 does not exist") {
		t.Fatalf("err = %v, want ErrMountFailed with mount.err's text", err)
	}
	if !strings.Contains(err.Error(), `does not exist\n\x1b[2Jcaused by: \u202eoops`) {
		t.Errorf("err = %q, want mount.err's text on one line, its control and format characters escaped", err)
	}
	if got := r.k.at(r.m.paths.source("mp-a")); len(got) != 0 {
		t.Errorf("source still mounted: %v", got)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target created: %v", err)
	}
}

func TestMountFailedBindIsUndone(t *testing.T) {
	for _, ok := range []int{0, 1} { // the first bind fails; the second does
		r := newRig(t)
		r.mountpointPod("mp-a", "w1")
		r.k.failOn["bind"] = errors.New("permission denied")
		r.k.bindsOK = ok
		target := r.target("w1")
		if err := r.m.Mount(context.Background(), request(t, target, "w1")); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("%d binds made: err = %v", ok, err)
		}
		if got := r.k.at(target); len(got) != 0 {
			t.Errorf("%d binds made: target keeps %v", ok, got)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%d binds made: target directory left: %v", ok, err)
		}
	}
}

// An earlier release mounted a tmpfs guard under one bind. Its targets are repaired with two
// binds on top, and their unpublish removes the guard with the rest.
func TestEarlierReleasesGuardedTarget(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	ctx := context.Background()
	target := r.target("w1")
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	r.k.oldGuard(target)
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	if got := r.stack(target); !slices.Equal(got, []string{guard, bind, bind}) {
		t.Fatalf("target stack = %v, want the old guard under two binds", got)
	}
	source := r.m.paths.source("mp-a")
	r.k.kill(source)
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	if got := r.stack(target); !slices.Equal(got, []string{guard, bind, bind, bind, bind}) {
		t.Fatalf("target stack after repair = %v", got)
	}
	if err := r.m.Unmount(ctx, target); err != nil {
		t.Fatal(err)
	}
	if got := r.k.at(target); len(got) != 0 {
		t.Errorf("target keeps %v after unpublish", got)
	}
}

func TestMountRefusesBeforeMakingAnything(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	ctx := context.Background()
	noUID := request(t, r.target("w1"), "")
	if err := r.m.Mount(ctx, noUID); !errors.Is(err, mounter.ErrInvalidRequest) {
		t.Errorf("no workload UID: %v, want ErrInvalidRequest", err)
	}
	link := r.target("w1")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Mount(ctx, request(t, link, "w1")); !errors.Is(err, mounter.ErrInvalidRequest) {
		t.Errorf("symlink target: %v, want ErrInvalidRequest", err)
	}
	r.c.waitErr = errors.New("context deadline exceeded (the Mountpoint Pod is not ready): no attachment")
	if err := r.m.Mount(ctx, request(t, r.target("w9"), "w9")); err == nil || !strings.Contains(err.Error(), "no attachment") {
		t.Errorf("wait failure: %v", err)
	}
	if calls := r.k.took(); len(calls) != 0 || len(r.sends()) != 0 {
		t.Errorf("refused requests mounted: %v, %d hand-overs", calls, len(r.sends()))
	}
}

func TestUnmountRemovesOnlyTheWorkloadsBind(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1", "w2")
	ctx := context.Background()
	t1, t2 := r.target("w1"), r.target("w2")
	for w, tgt := range map[string]string{"w1": t1, "w2": t2} {
		if err := r.m.Mount(ctx, request(t, tgt, w)); err != nil {
			t.Fatal(err)
		}
	}
	var unbound []string
	r.m.unbound = func(mp string) { unbound = append(unbound, mp) }
	r.k.took()
	if err := r.m.Unmount(ctx, t1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"unmount " + t1 + " plain", "unmount " + t1 + " plain"}, r.k.took()); diff != "" {
		t.Errorf("kernel calls (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(t1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target left: %v", err)
	}
	if _, err := os.Stat(r.m.paths.targetRecord(t1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
	if !slices.Equal(unbound, []string{"mp-a"}) {
		t.Errorf("unbound = %v, want mp-a", unbound)
	}
	if got := r.stack(r.m.paths.source("mp-a")); len(got) != 1 {
		t.Errorf("shared mount = %v, want it kept for w2", got)
	}
	if got := r.stack(t2); len(got) != 2 {
		t.Errorf("w2's target = %v, want untouched", got)
	}
	// Again, and on a target that never existed: nothing to do.
	if err := r.m.Unmount(ctx, t1); err != nil {
		t.Errorf("second unmount: %v", err)
	}
	if err := r.m.Unmount(ctx, filepath.Join(r.kubelet, "pods", "none", "volumes", "kubernetes.io~csi", "pv-1", "mount")); err != nil {
		t.Errorf("unmount of nothing: %v", err)
	}
}

func TestUnmountRefusesForeignMount(t *testing.T) {
	r := newRig(t)
	target := r.target("w1")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	r.k.mu.Lock()
	r.k.add(fakeMount{minor: 7, point: target, fsType: "ext4", source: "/dev/sdb"})
	r.k.mu.Unlock()
	if err := r.m.Unmount(context.Background(), target); !errors.Is(err, mounter.ErrTargetInUse) {
		t.Fatalf("err = %v, want ErrTargetInUse", err)
	}
	if got := r.k.at(target); len(got) != 1 {
		t.Errorf("foreign mount touched: %v", got)
	}
}

func TestRepair(t *testing.T) {
	r := newRig(t)
	r.mountpointPod("mp-a", "w1")
	ctx := context.Background()
	target := r.target("w1")
	if err := r.m.Mount(ctx, request(t, target, "w1")); err != nil {
		t.Fatal(err)
	}
	if repaired, err := r.m.Repair(ctx, target); repaired || err != nil {
		t.Errorf("repair of a live target: %v %v", repaired, err)
	}
	r.k.kill(r.m.paths.source("mp-a"))
	// Not while the Mountpoint Pod is not Running (kubelet restarts its container).
	r.c.mu.Lock()
	r.c.pods["mp-a"].Status.Phase = "Pending"
	r.c.mu.Unlock()
	if repaired, err := r.m.Repair(ctx, target); repaired || !errors.Is(err, mounter.ErrUnavailable) {
		t.Errorf("repair with the pod not running: %v %v, want ErrUnavailable", repaired, err)
	}
	r.c.mu.Lock()
	r.c.pods["mp-a"].Status.Phase = "Running"
	r.c.mu.Unlock()
	if repaired, err := r.m.Repair(ctx, target); !repaired || err != nil {
		t.Fatalf("repair: %v %v", repaired, err)
	}
	if n := len(r.sends()); n != 2 {
		t.Errorf("%d hand-overs, want 2 (the dead shared mount handed over again)", n)
	}
	if res, _ := r.m.health.Check(ctx, target); res.State.String() != "live" {
		t.Errorf("target after repair: %v", res.State)
	}
	if repaired, err := r.m.Repair(ctx, r.target("unknown")); repaired || err != nil {
		t.Errorf("repair of a target without record: %v %v", repaired, err)
	}
}

// TestRepairWaitsForKubeletAfterReboot: after a node reboot the Mountpoint Pod's comm directory
// is a new, empty tmpfs: the monitor's repair (from records, without credentials) must not hand
// over a mount whose mount-s3 would fail for lack of them; kubelet's publish, which carries
// them, repairs it.
func TestRepairWaitsForKubeletAfterReboot(t *testing.T) {
	r := newRig(t)
	pod := r.mountpointPod("mp-a", "w1")
	ctx := context.Background()
	target := r.target("w1")
	req := request(t, target, "w1")
	if err := r.m.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	r.k.kill(r.m.paths.source("mp-a"))
	comm := r.m.paths.comm(pod.UID)
	if err := os.RemoveAll(comm); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(comm, 0o755); err != nil {
		t.Fatal(err)
	}
	repaired, err := r.m.Repair(ctx, target)
	if repaired || !errors.Is(err, mounter.ErrUnavailable) || !strings.Contains(err.Error(), "/comm/credentials/") {
		t.Fatalf("repair without credentials = %v %v, want ErrUnavailable naming the missing file", repaired, err)
	}
	if n := len(r.sends()); n != 1 {
		t.Errorf("%d hand-overs, want none after the first", n)
	}
	if err := r.m.Mount(ctx, req); err != nil {
		t.Fatalf("kubelet's publish: %v", err)
	}
	if n := len(r.sends()); n != 2 {
		t.Errorf("%d hand-overs, want the publish's", n)
	}
	if res, _ := r.m.health.Check(ctx, target); res.State.String() != "live" {
		t.Errorf("target after the publish: %v", res.State)
	}
}

// TestMountErrIsCappedAndNeverFollowed: the comm directory is the Mountpoint Pod's to write. A
// huge mount.err is read up to the cap and marked truncated; a mount.err that is a link to a
// host file is never read (the publish then fails on its deadline, not with the host file's
// content).
func TestMountErrIsCappedAndNeverFollowed(t *testing.T) {
	huge := strings.Repeat("x", 10<<20)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, comm string)
		check func(t *testing.T, err error)
	}{
		{"huge", func(t *testing.T, comm string) {
			tmp := filepath.Join(comm, ".err")
			if err := os.WriteFile(tmp, []byte(huge), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(comm, mountoptions.ErrorFileName)); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, err error) {
			if !errors.Is(err, mounter.ErrMountFailed) || !strings.Contains(err.Error(), "[truncated]") || len(err.Error()) > maxWatchedFile+1024 {
				t.Errorf("err (%d bytes) = %.200q…, want mount.err cut at %d bytes", len(err.Error()), err, maxWatchedFile)
			}
		}},
		{"link to a host file", func(t *testing.T, comm string) {
			secret := filepath.Join(t.TempDir(), "shadow")
			if err := os.WriteFile(secret, []byte("root:secret-hash"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(secret, filepath.Join(comm, mountoptions.ErrorFileName)); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, err error) {
			if err == nil || strings.Contains(err.Error(), "secret-hash") {
				t.Errorf("err = %v; want a failure that does not quote the linked file", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.mountpointPod("mp-a", "w1")
			r.onSend = func(comm string) { tc.plant(t, comm) }
			never := make(chan struct{})
			defer close(never)
			r.k.answers = func(string) error { <-never; return nil }
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := r.m.Mount(ctx, request(t, r.target("w1"), "w1"))
			tc.check(t, err)
			if got := r.k.at(r.m.paths.source("mp-a")); len(got) != 0 {
				t.Errorf("source still mounted: %v", got)
			}
		})
	}
}

// TestFdArgs: what mount-s3 gets with the FUSE fd (CONFORMANCE.md M7, A2-A4): never the mount
// call's options, and --allow-root unless --allow-other.
func TestFdArgs(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"--allow-root"}},
		{[]string{"read-only", "auto-unmount", "allow-delete"}, []string{"--allow-delete", "--allow-root"}},
		{[]string{"allow-other"}, []string{"--allow-other"}},
		{[]string{"allow-root"}, []string{"--allow-root"}},
	} {
		var a mountargs.Args
		for _, f := range c.flags {
			a.Set(f, "")
		}
		got := fdArgs(a).List()
		if !slices.Equal(got, c.want) {
			t.Errorf("fdArgs(%q) = %q, want %q", c.flags, got, c.want)
		}
		if len(a.List()) != len(c.flags) {
			t.Errorf("fdArgs changed its input: %q", a.List())
		}
	}
}
