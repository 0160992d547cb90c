package cluster

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// docStepBlocks are the fenced blocks of docs/upgrade.md the scenarios run as they are (each
// preceded by a line `<!-- steps: NAME -->`): a block that changes the cluster is documented
// only if a scenario runs it.
var docStepBlocks = []string{"upgrade-1x", "upgrade-2x", "rollback", "gitops", "gitops-leftovers-1x", "gitops-leftovers-2x", "back-to-helm",
	"between-releases", "between-releases-rollback", "ondelete"}

// docSteps returns the commands of docs/upgrade.md's block name (continuation lines joined,
// comments dropped).
func docSteps(t *testing.T, name string) []string {
	t.Helper()
	blocks := upgradeDocBlocks(t)
	steps, ok := blocks[name]
	if !ok {
		t.Fatalf("docs/upgrade.md has no block <!-- steps: %s -->", name)
	}
	return steps
}

// upgradeDocBlocks reads every steps block of docs/upgrade.md.
func upgradeDocBlocks(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(harness.RepoRoot(), "docs", "upgrade.md"))
	harness.Must(t, err)
	defer f.Close()
	blocks := map[string][]string{}
	sc := bufio.NewScanner(f)
	name, in, pending := "", false, ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "<!-- steps: "):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- steps: "), " -->")
			blocks[name] = nil
		case strings.HasPrefix(line, "```") && name != "":
			if in {
				name, in = "", false
			} else {
				in = true
			}
		case in:
			if i := strings.Index(line, " # "); i >= 0 {
				line = strings.TrimSpace(line[:i])
			}
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			pending += strings.TrimSuffix(line, "\\")
			if strings.HasSuffix(line, "\\") {
				pending += " "
				continue
			}
			blocks[name] = append(blocks[name], pending)
			pending = ""
		}
	}
	harness.Must(t, sc.Err())
	return blocks
}

// runDocSteps runs docs/upgrade.md's block name in dir (where values.yaml is), the placeholders
// filled: <release>, <ns>, <chart> (this checkout's chart), <revision>, <node>. kubectl and helm are the
// rig's, with its admin kubeconfig; helm template gets no cluster, as a GitOps tool has none.
func runDocSteps(t *testing.T, name, dir string, revision string) {
	t.Helper()
	fill := strings.NewReplacer("<release>", release, "<ns>", releaseNS, "<chart>", harness.ChartDir(), "<revision>", revision, "<node>", rig.NodeName)
	for _, step := range docSteps(t, name) {
		line := fill.Replace(step)
		if strings.ContainsAny(line, "<>") && !strings.Contains(line, " > ") {
			t.Fatalf("docs/upgrade.md %s: %q has a placeholder the suite cannot fill", name, step)
		}
		args := strings.Fields(line)
		var cmd string
		switch {
		case args[0] == "kubectl":
			cmd = filepath.Join(env.bin, "k8s", "kubectl") + " --kubeconfig=" + rig.Kubeconfig() + strings.TrimPrefix(line, "kubectl")
		case args[0] == "helm" && len(args) > 1 && args[1] == "template":
			cmd = "env -u KUBECONFIG " + filepath.Join(env.bin, "helm") + " --kubeconfig=/nonexistent" + strings.TrimPrefix(line, "helm")
		case args[0] == "helm":
			cmd = filepath.Join(env.bin, "helm") + " --kubeconfig=" + rig.Kubeconfig() + strings.TrimPrefix(line, "helm")
		default:
			t.Fatalf("docs/upgrade.md %s: %q is neither kubectl nor helm", name, step)
		}
		out, err := command(t, 5*time.Minute, "sh", "-c", "cd "+dir+" && "+cmd)
		if err != nil {
			t.Fatalf("docs/upgrade.md %s: `%s`: %v\n%s", name, step, err, out)
		}
	}
}

// testUpgradeDocBlocks: docs/upgrade.md has exactly the blocks the scenarios run, none empty,
// and every other command it gives to run (in a code block) only reads (testDocCommands runs
// those).
func testUpgradeDocBlocks(t *testing.T) {
	blocks := upgradeDocBlocks(t)
	for _, name := range docStepBlocks {
		if len(blocks[name]) == 0 {
			t.Errorf("docs/upgrade.md: block %s missing or empty", name)
		}
	}
	var inBlocks []string
	for name, steps := range blocks {
		if !slices.Contains(docStepBlocks, name) {
			t.Errorf("docs/upgrade.md: block %s is run by no scenario", name)
		}
		inBlocks = append(inBlocks, steps...)
	}
	for _, c := range docCommands(t) {
		if !strings.HasPrefix(c.where, "upgrade.md:") || !c.fenced {
			continue
		}
		line := c.line
		if i := strings.Index(line, " # "); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if !readOnly(strings.Fields(line)) && !slices.Contains(inBlocks, line) {
			t.Errorf("%s: `%s` changes the cluster but is in no steps block a scenario runs", c.where, c.line)
		}
	}
}
