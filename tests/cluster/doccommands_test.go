package cluster

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3-csi-driver/tests/cluster/rig"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// docCommand is a kubectl or helm command quoted in docs/, where it was found; fenced: in a
// code block (a command to run), not in a prose code span.
type docCommand struct {
	where, line string
	fenced      bool
}

var inlineCode = regexp.MustCompile("`((?:kubectl|helm) [^`]+)`")

// docCommands returns every kubectl and helm command of docs/*.md: the lines of fenced code
// blocks that start with one (continuation lines joined), and inline code spans that are one.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "docs", "*.md"))
	harness.Must(t, err)
	var out []docCommand
	for _, f := range files {
		fh, err := os.Open(f)
		harness.Must(t, err)
		sc := bufio.NewScanner(fh)
		fenced, n, pending, start := false, 0, "", 0
		for sc.Scan() {
			n++
			line := sc.Text()
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				if pending != "" {
					pending += " " + strings.TrimSuffix(trimmed, "\\")
				} else if strings.HasPrefix(trimmed, "kubectl ") || strings.HasPrefix(trimmed, "helm ") {
					pending, start = strings.TrimSuffix(trimmed, "\\"), n
				}
				if pending != "" && !strings.HasSuffix(trimmed, "\\") {
					out = append(out, docCommand{where: filepath.Base(f) + ":" + strconv.Itoa(start), line: pending, fenced: true})
					pending = ""
				}
				continue
			}
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				out = append(out, docCommand{where: filepath.Base(f) + ":" + strconv.Itoa(n), line: m[1]})
			}
		}
		fh.Close()
	}
	return out
}

// readOnly reports whether a command only reads (it may run against the suite's cluster).
func readOnly(args []string) bool {
	if len(args) < 2 {
		return false
	}
	verb := ""
	for i := 1; i < len(args); i++ { // skip flags and their values (-n ns)
		a := args[i]
		if a == "-n" || a == "--namespace" {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") {
			verb = a
			if args[0] == "kubectl" && a == "rollout" && i+1 < len(args) {
				verb += " " + args[i+1]
			}
			break
		}
	}
	switch args[0] {
	case "kubectl":
		switch verb {
		case "get", "describe", "logs", "rollout status", "api-resources", "explain", "version":
			return true
		}
	case "helm":
		switch verb {
		case "get", "status", "history", "list":
			return true
		}
	}
	return false
}

// testDocCommands runs the read-only kubectl and helm commands the docs quote, with their
// placeholders filled from the suite's cluster (namespace, node, node plugin pod, release), and
// checks that each succeeds: a command that names a container, a field selector, a proxy path
// or a resource that is not there fails here. A pipeline runs up to its first pipe; a comment is
// dropped. Commands that change the cluster (label, delete, helm upgrade, …) and lines with a
// placeholder the suite cannot fill are skipped and counted.
func testDocCommands(t *testing.T) {
	var plugins corev1.PodList
	harness.Must(t, env.c.List(context.Background(), &plugins, client.InNamespace(releaseNS), client.MatchingLabels{"app": "s3-csi-node"}))
	if len(plugins.Items) == 0 {
		t.Fatal("no node plugin pod")
	}
	fill := strings.NewReplacer(
		"<ns>", releaseNS, "<driver namespace>", releaseNS, "<release>", release,
		"<node>", rig.NodeName, "worker-3", rig.NodeName, "worker-7", rig.NodeName, "node-7", rig.NodeName,
		"<pod>", plugins.Items[0].Name,
	)
	kubectl := filepath.Join(env.bin, "k8s", "kubectl") + " --kubeconfig=" + rig.Kubeconfig()
	helmBin := filepath.Join(env.bin, "helm") + " --kubeconfig=" + rig.Kubeconfig()
	ran, skipped := 0, 0
	for _, c := range docCommands(t) {
		line := fill.Replace(c.line)
		if i := strings.Index(line, " | "); i >= 0 {
			line = line[:i]
		}
		if i := strings.Index(line, " # "); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		args := strings.Fields(line)
		if !readOnly(args) || strings.ContainsAny(line, "<>…$") || strings.Contains(line, "...") {
			skipped++
			continue
		}
		cmd := kubectl + strings.TrimPrefix(line, "kubectl")
		if args[0] == "helm" {
			cmd = helmBin + strings.TrimPrefix(line, "helm")
		}
		out, err := command(t, time.Minute, "sh", "-c", cmd)
		if err != nil {
			t.Errorf("%s: `%s` failed: %v\n%s", c.where, c.line, err, out)
		}
		ran++
	}
	t.Logf("ran %d read-only commands quoted in docs/, skipped %d (they change the cluster or name what this cluster lacks)", ran, skipped)
	t.Run("upgrade-doc-blocks", testUpgradeDocBlocks)
	if ran < 12 {
		t.Errorf("only %d commands of docs/ ran: the extraction broke", ran)
	}
}
