package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

var (
	e2eProcs   = 6
	e2eTimeout = 40 * time.Minute
)

// e2eSkip lists what the suite skips on purpose, with the reason. Each entry is a regular
// expression over the full spec text. Patterns first (what an S3 bucket is not), then single
// specs whose expectation mount-s3's semantics cannot meet. Specs that skip themselves at run
// time (the framework checks the test driver's capabilities) report their own reason.
var e2eSkip = []struct{ re, reason string }{
	// Volume types and features S3 buckets do not have.
	{`\(block volmode\)`, "block volumes: a bucket is not a block device"},
	{`\((ext3|ext4|xfs|ntfs)\)`, "filesystem types: mount-s3 has one, the bucket's; fsType is not a choice"},
	{`Snapshot \(`, "snapshots: S3 volumes have no CSI snapshots"},
	{`\(allowExpansion\)`, "expansion: buckets have no size"},
	{`Inline-volume|CSI Ephemeral-volume`, "CSI inline (ephemeral) volumes: the CSIDriver allows Persistent volumes only (generic ephemeral volumes are tested)"},
	{`Pre-provisioned PV`, "the External Storage framework has no pre-provisioned PV pattern for external drivers; static PVs are the cluster suite's own scenarios"},
	// mount-s3 semantics (docs/filesystem.md, "Not supported").
	{`subPath should fail if (subpath directory|subpath file|non-existent subpath|subpath with backstepping) is outside the volume`,
		"symbolic links: these specs make the subPath a symlink pointing outside the volume, which mount-s3 cannot create (ln fails with EOPNOTSUPP; the spec then waits 5 minutes)"},
	{`volumeIO.*should write files of various sizes, verify size, validate content`, "appends to an existing file: mount-s3 writes whole objects sequentially"},
	{`provisioning should provision storage with any volume data source`,
		"volume populators: the spec deploys the hello-populator image (kubernetes-csi/lib-volume-populator), which the module proxy does not serve, so it cannot be built here; it tests the populator, the driver only gets a plain CreateVolume"},
	{`provisioning should provision storage with mount options`,
		"the spec looks for every StorageClass mount option in the kernel's mount table; mount-s3's options (allow-delete, file-mode=...) configure the FUSE daemon and never appear there. Every other spec mounts with this StorageClass's options"},
	{`\[Disruptive\]|\[Serial\].*kubelet`, "disruptive specs restart kubelet through SSH or nsenter into PID 1's namespaces, which this machine does not allow"},
}

// canEnterHostMountNamespace reports whether PID 1's mount namespace can be opened, which the
// e2e framework's host-exec pods need (nsenter --mount=/rootfs/proc/1/ns/mnt).
func canEnterHostMountNamespace() error {
	f, err := os.Open("/proc/1/ns/mnt")
	if err != nil {
		return err
	}
	return f.Close()
}

// ginkgoReport is the part of Ginkgo's JSON report the suite reads.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		RunTime                 int64
		Failure                 struct {
			Message string
		}
	}
}

// testE2E runs the upstream storage e2e suites against the driver with the node in mode: every
// spec of the External Storage framework for dynamic PVs and generic ephemeral volumes, in
// parallel (the ginkgo CLI), and reports passed, failed and skipped specs with the reason of
// every skip.
func testE2E(t *testing.T, mode string) {
	setMode(t, mode)
	runE2E(t, "e2e-"+mode, "")
}

// runE2E runs the specs of the External Storage framework for the driver whose text also
// matches focus (all when it is empty), with reports in bin/cluster-reports/<name>, and checks
// them as testE2E says.
func runE2E(t *testing.T, name, focus string) {
	reportDir := filepath.Join(env.bin, "cluster-reports", name)
	harness.Must(t, os.RemoveAll(reportDir))
	harness.Must(t, os.MkdirAll(reportDir, 0o755))
	if err := canEnterHostMountNamespace(); err != nil {
		// Checked on every run: where it works, the spec runs.
		e2eSkip = append(e2eSkip, struct{ re, reason string }{`volumeMode should not mount / map unused volumes in a pod`,
			"the spec inspects the node through nsenter into PID 1's mount namespace, which this machine refuses even to root (" + err.Error() + ")"})
	}
	var skip []string
	for _, s := range e2eSkip {
		skip = append(skip, s.re)
	}
	// The whole suite runs as two ginkgo runs at once: the two specs that restart containers on
	// a subPath (about 100 s each, most of it the kubelet's restart back-off) on 2 processes of
	// their own from the start, everything else on 5 more (7 in all: the rest on 4 took
	// 142 s in pod mode, longer than the slow two). In one run on 6, ginkgo handed the slow two
	// out late (at 37-71 s), and the run took as long as they did after that.
	type part struct {
		dir, focus string
		skip       []string
		procs      int
	}
	parts := []part{{reportDir, focus, skip, e2eProcs}}
	if focus == "" {
		parts = []part{
			{filepath.Join(reportDir, "slow"), e2eSlow, skip, 2},
			{filepath.Join(reportDir, "rest"), "", append(slices.Clone(skip), e2eSlow), e2eProcs - 1},
		}
	}
	type result struct {
		out string
		err error
	}
	results := make([]result, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		harness.Must(t, os.MkdirAll(p.dir, 0o755))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].out, results[i].err = runGinkgo(t, p.dir, p.focus, p.skip, p.procs)
		}()
	}
	wg.Wait()
	var reports []string
	for i, p := range parts {
		harness.Must(t, os.WriteFile(filepath.Join(p.dir, "output.log"), []byte(results[i].out), 0o644))
		reports = append(reports, filepath.Join(p.dir, "report.json"))
	}
	passed, failed, skipped := summarizeE2E(t, focus, reports...)
	t.Logf("%s: %d passed, %d failed, %d skipped (reports in %s)", name, passed, failed, skipped, reportDir)
	for _, r := range results {
		if r.err != nil && failed == 0 {
			t.Errorf("ginkgo: %v\n%s", r.err, tail(r.out, 60))
		}
	}
	if passed == 0 {
		t.Errorf("no e2e spec passed")
	}
}

// e2eSlow are the specs the whole suite runs apart (runE2E).
const e2eSlow = `subPath should support restarting containers`

// runGinkgo runs the specs of the driver matching focus and none of skip on procs processes,
// with its reports in dir, and returns ginkgo's output.
func runGinkgo(t *testing.T, dir, focus string, skip []string, procs int) (string, error) {
	k8s := filepath.Join(env.bin, "k8s")
	args := []string{
		fmt.Sprintf("--procs=%d", procs), "--timeout=" + e2eTimeout.String(), "--no-color", "--silence-skips",
		"--focus=External.Storage.*Driver: " + driverName + ".*" + focus, "--skip=" + strings.Join(skip, "|"),
		"--json-report=report.json", "--junit-report=junit.xml", "--output-dir=" + dir,
		filepath.Join(k8s, "e2e.test"), "--",
		"--provider=skeleton", "--kubeconfig=" + rig.Kubeconfig(), "--kubectl-path=" + filepath.Join(k8s, "kubectl"),
		"--storage.testdriver=" + filepath.Join(harness.RepoRoot(), "tests", "cluster", "testdriver.yaml"),
		"--repo-root=" + harness.RepoRoot(), "--report-dir=" + dir,
		"--allowed-not-ready-nodes=0", "--node-os-distro=debian",
	}
	return command(t, e2eTimeout+5*time.Minute, filepath.Join(k8s, "ginkgo"), args...)
}

// summarizeE2E reads the JSON reports of the specs matching focus (one spec may be in several,
// run in one and filtered out of the others: its run counts), fails the test for every failed
// spec and for every skip without a reason, and logs the skips grouped by reason.
func summarizeE2E(t *testing.T, focus string, paths ...string) (passed, failed, skipped int) {
	t.Helper()
	inFocus := regexp.MustCompile(regexp.QuoteMeta(driverName) + ".*" + focus)
	type spec struct{ state, message string }
	type specKey struct {
		name string
		n    int
	}
	specs := map[specKey]spec{}
	var order []specKey
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("e2e report: %v", err)
		}
		var reports []ginkgoReport
		harness.Must(t, json.Unmarshal(b, &reports))
		nth := map[string]int{} // two specs of one report may have the same text
		for _, r := range reports {
			for _, s := range r.SpecReports {
				if s.LeafNodeType != "It" {
					continue
				}
				name := strings.Join(append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
				if !strings.Contains(name, driverName) || !inFocus.MatchString(name) {
					continue // outside the focus
				}
				key := specKey{name, nth[name]}
				nth[name]++
				prev, seen := specs[key]
				if !seen {
					order = append(order, key)
				}
				if !seen || prev.state == "skipped" {
					specs[key] = spec{s.State, s.Failure.Message}
				}
			}
		}
	}
	reasons := map[string][]string{}
	for _, key := range order {
		name, s := key.name, specs[key]
		switch s.state {
		case "passed":
			passed++
		case "skipped":
			skipped++
			reason := strings.TrimSpace(s.message)
			for _, k := range e2eSkip {
				if regexp.MustCompile(k.re).MatchString(name) {
					reason = "skipped by the suite: " + k.reason
					break
				}
			}
			if reason == "" {
				t.Errorf("spec skipped without a reason: %s", name)
				reason = "(none)"
			}
			reasons[reason] = append(reasons[reason], name)
		default:
			failed++
			t.Errorf("%s: %s\n%s", s.state, name, tail(s.message, 20))
		}
	}
	var keys []string
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("skipped %3d: %s", len(reasons[k]), firstLine(k))
	}
	return passed, failed, skipped
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
