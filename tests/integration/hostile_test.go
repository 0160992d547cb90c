package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// hostileCase is one request of the hostile corpus: what it sends, the gRPC code it must get
// and the request field its message must start with.
type hostileCase struct {
	name  string
	call  func(context.Context) error
	code  codes.Code
	field string
}

// unsafeRunes are characters that change how text reads without being visible, or break it
// into lines: none may pass into a name, a path, an option or a log line.
var unsafeRunes = map[string]string{
	"RLO": "\u202e", "LRI": "\u2066", "ZWSP": "\u200b", "ZWJ": "\u200d", "BOM": "\ufeff",
	"LS": "\u2028", "PS": "\u2029", "NEL": "\u0085", "SHY": "\u00ad", "NUL": "\x00", "ESC": "\x1b",
}

// TestHostileCorpus sends more than 150 hostile requests to the real node plugin (systemd
// mode, real systemd user manager, real S3 server): symlinks at every component of the target
// path, paths that escape or are not paths, mount options naming host paths in every spelling
// mount-s3 accepts, reserved bucket names, invisible Unicode in every text field, secrets
// whose key names are pasted values, oversized fields, one target claimed by two volumes and
// RPCs out of order. Each must fail with its code and a message that starts with the field;
// afterwards nothing exists that the requests could have created: no unit, no mount, no file
// in the kubelet directory, nothing outside it, and no secret in the driver's log.
func TestHostileCorpus(t *testing.T) {
	s := newSuite(t, true)
	s.s3.CreateBucket(t, "victim")
	outside := t.TempDir()
	good := s.target("pod-good")

	// Symlinks at every component of kubelet's target layout, each leading outside; the
	// outside tree mirrors the layout so that every link resolves (the real attack).
	components := []string{"pods/uid-%d", "volumes", "kubernetes.io~csi", "pv", "mount"}
	var linkTargets []string
	for i := range components {
		pod := fmt.Sprintf("link-%d", i)
		target := s.target(pod)
		rel := strings.TrimPrefix(target, s.kubelet+"/pods/")
		parts := strings.Split(rel, "/")
		mirror := filepath.Join(outside, fmt.Sprintf("mirror-%d", i))
		if err := os.MkdirAll(filepath.Join(append([]string{mirror}, parts[i:]...)...), 0o755); err != nil {
			t.Fatal(err)
		}
		real := filepath.Join(append([]string{s.kubelet, "pods"}, parts[:i+1]...)...)
		if err := os.RemoveAll(real); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(append([]string{mirror}, parts[i:i+1]...)...), real); err != nil {
			t.Fatal(err)
		}
		linkTargets = append(linkTargets, target)
	}
	dangling := s.target("pod-dangling")
	if err := os.Symlink(filepath.Join(outside, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	fileTarget := s.target("pod-file")
	if err := os.WriteFile(fileTarget, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	outsideBefore := snapshot(t, outside)
	before := snapshot(t, s.kubelet)

	publish := func(mutate func(*csi.NodePublishVolumeRequest)) func(context.Context) error {
		return func(ctx context.Context) error {
			r := rw(good, "victim")
			mutate(r)
			_, err := s.drv.Node.NodePublishVolume(ctx, r)
			return err
		}
	}
	withTarget := func(p string) func(context.Context) error {
		return publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = p })
	}
	withFlags := func(flags ...string) func(context.Context) error {
		return publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().MountFlags = flags })
	}
	withBucket := func(b string) func(context.Context) error {
		return publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = b })
	}
	withSecret := func(secrets map[string]string) func(context.Context) error {
		return publish(func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["authenticationSource"] = "secret"
			r.Secrets = secrets
		})
	}
	const (
		inv = codes.InvalidArgument
		tp  = "target_path"
		mf  = "volume_capability.mount.mount_flags"
		bn  = "volume_context.bucketName"
	)
	var corpus []hostileCase
	add := func(name string, code codes.Code, field string, call func(context.Context) error) {
		corpus = append(corpus, hostileCase{name: name, call: call, code: code, field: field})
	}

	// Target paths.
	for i, p := range linkTargets {
		add(fmt.Sprintf("symlink at component %d (%s)", i, components[i]), inv, tp, withTarget(p))
	}
	add("dangling symlink as target", inv, tp, withTarget(dangling))
	add("regular file as target", inv, tp, withTarget(fileTarget))
	pods := s.kubelet + "/pods"
	for _, p := range []string{
		"", "relative/mount", "./pods/x/mount", pods + "/x/../../../etc", pods + "/x/./mount", pods + "//x/mount",
		pods + "/x/mount/", pods, pods + "/", s.kubelet, s.kubelet + "/plugins/s3.csi.scality.com/mount", "/", "/etc/cron.d/x",
		"/proc/self/root" + pods + "/x/mount", pods + "/x/\x00/mount", pods + "/" + strings.Repeat("a", 4100),
		pods + "/x\n/mount", pods + "/x\t/mount",
	} {
		add(fmt.Sprintf("target %.40q", p), inv, tp, withTarget(p))
	}
	for name, r := range unsafeRunes {
		add("target with "+name, inv, tp, withTarget(pods+"/x"+r+"/volumes/kubernetes.io~csi/pv/mount"))
	}

	// Mount options naming host paths, in every spelling mount-s3 accepts.
	for _, o := range []string{
		"cache=/", "--cache=/etc", "--cache /var/lib/kubelet", "cache /root", "-cache=/", "cache=relative", "cache=", "--cache=/tmp/../etc",
		"log-directory=/etc/cron.d", "--log-directory=/", "--log-directory /var/log", "log-directory /x", "-l /", "-l=/etc", "l /tmp", "-l",
		"ca-bundle=/etc/shadow", "--ca-bundle /proc/1/environ", "profile=/etc/passwd", "--profile default",
		"endpoint-url=file:///etc/passwd", "--endpoint-url http://169.254.169.254", "-o cache=/", "o=log-directory=/",
		"--prefix=a/$(id)/", "--region=`id`", "allow-delete\n--cache=/", "--foreground", "-f", "--help", "-V",
		"--upload-checksums=/etc", "--bind=../../../etc", "--user-agent-prefix=/x",
	} {
		add(fmt.Sprintf("option %q", o), inv, mf, withFlags(o))
	}
	for name, r := range unsafeRunes {
		add("option with "+name, inv, mf, withFlags("--region=eu"+r+"west"))
	}

	// Bucket names: S3's rules, one rule set.
	for _, b := range []string{
		"xn--bucket", "sthree-bucket", "amzn-s3-demo-x", "bucket-s3alias", "bucket--ol-s3", "bucket--x-s3", "bucket--table-s3",
		"a.-b", "a-.b", "a..b", "-ab", "ab-", ".ab", "ab.", "ab", strings.Repeat("b", 64), "Bucket", "bucket_1", "192.168.0.1",
		"../etc", "--cache=/", "bucket/key", "bucket name",
	} {
		add(fmt.Sprintf("bucket %q", b), inv, bn, withBucket(b))
	}
	for name, r := range unsafeRunes {
		add("bucket with "+name, inv, bn, withBucket("vic"+r+"tim"))
	}

	// Other text fields with invisible or control characters.
	for name, r := range unsafeRunes {
		add("volume id with "+name, inv, "volume_id", publish(func(req *csi.NodePublishVolumeRequest) { req.VolumeId = "vol" + r + "1" }))
		add("pod uid with "+name, inv, "volume_context.csi.storage.k8s.io/pod.uid", publish(func(req *csi.NodePublishVolumeRequest) {
			req.VolumeContext["csi.storage.k8s.io/pod.uid"] = "uid" + r
		}))
	}

	// Secrets: never echoed, whatever is pasted where.
	pasted := "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
	for name, sec := range map[string]map[string]string{
		"value pasted as a key name": {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s", pasted: ""},
		"unknown keys":               {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s", "aws_secret": pasted, "token": pasted},
		"newline in key id":          {"access_key_id": "AKIA\n[profile evil]", "secret_access_key": pasted},
		"quote in secret":            {"access_key_id": "AKIAEXAMPLE", "secret_access_key": pasted + "\""},
		"RLO in secret":              {"access_key_id": "AKIAEXAMPLE", "secret_access_key": pasted + "\u202e"},
		"oversized secret":           {"access_key_id": "AKIAEXAMPLE", "secret_access_key": strings.Repeat("s", 300)},
		"oversized token":            {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s", "session_token": strings.Repeat("t", 9000)},
		"empty token":                {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s", "session_token": ""},
		"missing secret key":         {"access_key_id": "AKIAEXAMPLE"},
		"empty":                      {},
	} {
		add("secret: "+name, inv, "secrets", withSecret(sec))
	}

	// Sizes.
	big := map[string]string{"bucketName": "victim"}
	for i := range 65 {
		big[fmt.Sprintf("k%d", i)] = "v"
	}
	add("65 context keys", inv, "volume_context", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext = big }))
	add("1 MiB context value", inv, "volume_context.x", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["x"] = strings.Repeat("v", 1<<20) }))
	add("65 options", inv, mf, withFlags(slices.Repeat([]string{"allow-delete"}, 65)...))
	add("2 KiB option", inv, mf, withFlags("--prefix="+strings.Repeat("p", 2048)+"/"))
	add("4 KiB volume id", inv, "volume_id", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = strings.Repeat("v", 4096) }))

	// Out of order: reading or unpublishing what was never published.
	add("stats before publish", codes.NotFound, "volume_path", func(ctx context.Context) error {
		_, err := s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-victim", VolumePath: good})
		return err
	})
	add("health of an unpublished volume", codes.NotFound, "volume_id", func(ctx context.Context) error {
		_, err := s.drv.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-never"})
		return err
	})
	add("stats at a symlinked target", codes.NotFound, "volume_path", func(ctx context.Context) error {
		_, err := s.drv.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-victim", VolumePath: linkTargets[4]})
		return err
	})
	add("stage (unsupported)", codes.Unimplemented, "", func(ctx context.Context) error {
		_, err := s.drv.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: good})
		return err
	})
	for i, p := range append(slices.Clone(linkTargets), dangling, pods+"/../../etc", "/") {
		// A link as the last component is only a link to remove (never followed); a link
		// higher up, or a path outside, is refused.
		code := inv
		if p == linkTargets[len(linkTargets)-1] || p == dangling {
			code = codes.OK
		}
		add(fmt.Sprintf("unpublish %d (%.40q)", i, p), code, tp, func(ctx context.Context) error {
			_, err := s.drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: p})
			return err
		})
	}

	if len(corpus) < 150 {
		t.Fatalf("the corpus has %d requests, want at least 150", len(corpus))
	}
	ctx := context.Background()
	for _, tc := range corpus {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx)
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tc.code)
			}
			if tc.code != codes.OK && tc.field != "" && !strings.HasPrefix(st.Message(), tc.field+":") {
				t.Errorf("message %q does not start with the field %q", st.Message(), tc.field)
			}
			if strings.Contains(st.Message(), pasted) {
				t.Errorf("message %q echoes a secret", st.Message())
			}
		})
	}
	t.Logf("%d hostile requests", len(corpus))

	// Nothing was created, nothing outside was touched, nothing leaked.
	if units := s.sd.Units("mount-s3-*"); len(units) != 0 {
		t.Errorf("units created by hostile requests: %v", units)
	}
	if m := slices.DeleteFunc(harness.MountsBelow(s.kubelet), func(p string) bool { return p == s.kubelet }); len(m) != 0 {
		t.Errorf("mounts made by hostile requests: %v", m)
	}
	// (Unpublishing a link may remove the link itself, never what it points to.)
	for _, p := range snapshot(t, s.kubelet) {
		if !slices.Contains(before, p) {
			t.Errorf("hostile requests created %s", p)
		}
	}
	if got := snapshot(t, outside); !slices.Equal(got, outsideBefore) {
		t.Errorf("hostile requests changed the outside tree:\nbefore %v\nafter  %v", outsideBefore, got)
	}
	// One target claimed by two volumes: AlreadyExists naming the target and the volume there.
	s.publish(rw(good, "victim"))
	other := rw(good, "victim")
	other.VolumeId = "vol-other"
	_, err := s.drv.Node.NodePublishVolume(ctx, other)
	if st := status.Convert(err); st.Code() != codes.AlreadyExists || !strings.Contains(st.Message(), good) || !strings.Contains(st.Message(), "vol-victim") {
		t.Errorf("second volume on one target: %v, want AlreadyExists naming %s and vol-victim", err, good)
	}
	s.unpublish(good)
	s.assertClean(good)

	log := s.drv.Log()
	for _, leak := range []string{pasted, "[profile evil]"} {
		if strings.Contains(log, leak) {
			t.Errorf("the driver log holds %q", leak)
		}
	}
}
