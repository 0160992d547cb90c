package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPieces(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{"Mountpoint Pod mount-s3/mp-… does not exist (yet)", []string{"Mountpoint Pod", "does not exist (yet"}},
		{"mount option \"cache=/…\": takes no path", []string{"mount option", "takes no path"}},
		{"unmount <target> (unit mount-s3-umount-<id>.service, job <result>, …): <umount output>", []string{"unmount", "unit", "job"}},
		{"… is Pending: container <container> waiting: ImagePullBackOff: …", []string{"container", "waiting"}},
		{"secrets: … the secret has <n> key(s)", []string{"secrets", "the secret has", "key(s"}},
	} {
		if got := pieces(tc.msg); !slices.Equal(got, tc.want) {
			t.Errorf("pieces(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

func TestEmitted(t *testing.T) {
	texts := []string{"Mountpoint Pod", "does not exist (yet); the controller creates it", "mount-s3 did not answer", "within", "job"}
	for piece, want := range map[string]bool{
		"does not exist (yet)":           true,
		"Mountpoint Pod":                 true,
		"mount-s3 did not answer within": true,  // a wrapped error and the text around it
		"did not answer within":          true,  // the end of one text, then another
		"does not exist at all":          false, // never said
		"answer within the hour":         false, // "within" is a whole text, not "within the hour"
		"Pod job":                        true,
		"systemd is unreachable":         false,
	} {
		if got := emitted(piece, texts); got != want {
			t.Errorf("emitted(%q) = %v, want %v", piece, got, want)
		}
	}
}

// TestCheckFindsDrift runs the checks on a small repository: a message the code never emits
// and links that leave the repository or lead nowhere are reported, the rest is not.
func TestCheckFindsDrift(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) { writeFile(t, root, rel, content) }
	write("pkg/a/a.go", "package a\n\nimport \"fmt\"\n\nfunc f(n string) error { return fmt.Errorf(\"volume %q is gone for good\", n) }\n")
	write("charts/scality-s3-csi-driver/templates/_x.tpl", `{{ fail "x is a value of the old chart: use y" }}`)
	write("docs/troubleshooting.md", strings.Join([]string{
		"| message | meaning |",
		"|---|---|",
		"| `volume \"v\" is gone for good` | fine |",
		"| `x is a value of the old chart: use …` | fine |",
		"| `volume … vanished into thin air` | drift |",
		"",
		"| not a message | x |",
		"|---|---|",
		"| `anything goes here` | not checked |",
	}, "\n"))
	write("README.md", "[ok](docs/troubleshooting.md) [anchor](docs/troubleshooting.md#message) [web](https://example.com) [here](#x)\n[gone](docs/none.md) [out](../outside.md)\n")
	texts, err := codeTexts(root)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := quotedMessages(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("messages = %v, want the three of the message table", msgs)
	}
	var missing []string
	for _, m := range msgs {
		for _, p := range pieces(m.text) {
			if !emitted(p, texts) {
				missing = append(missing, p)
			}
		}
	}
	if !slices.Equal(missing, []string{"vanished into thin air"}) {
		t.Errorf("pieces not emitted = %q, want only the drifted one", missing)
	}
	broken, err := brokenLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(broken) != 2 || !strings.Contains(broken[0], "docs/none.md: no such file") || !strings.Contains(broken[1], "../outside.md: leaves the repository") {
		t.Errorf("broken links = %q", broken)
	}
}

// writeFile writes content to rel under root, creating its directories.
// TestFlagTables checks the flag comparison on a -h output and a table that drift apart: a flag
// missing from the table, a row naming no flag, a wrong default, and klog's flags covered by
// the row that says so.
func TestFlagTables(t *testing.T) {
	help := strings.Join([]string{
		"Usage of x:",
		"  -endpoint string",
		"    \tCSI endpoint (default \"unix:///csi/csi.sock\")",
		"  -node-id string",
		"    \tnode name (default $CSI_NODE_NAME)",
		"  -timeout duration",
		"    \thow long (default 1m0s)",
		"  -hold",
		"    \tdo nothing",
		"  -v value",
		"    \tnumber for the log level verbosity",
		"  -vmodule value",
		"    \tcomma-separated list",
	}, "\n")
	defined := parseHelp(help)
	if got := defined["endpoint"].def; got != "unix:///csi/csi.sock" {
		t.Errorf("endpoint default = %q", got)
	}
	if got := defined["node-id"].def; got != "" {
		t.Errorf("node-id default = %q, want none (the usage text's (default $CSI_NODE_NAME) is not Go's)", got)
	}
	doc := strings.Join([]string{
		"## `x`",
		"",
		"| flag | default | meaning |",
		"|---|---|---|",
		"| `--endpoint` | `unix:///csi/csi.sock` | ok |",
		"| `--node-id` | `$CSI_NODE_NAME` | from the environment: not compared |",
		"| `--timeout` | `2m` | wrong default |",
		"| `--gone` | (none) | not defined |",
		"| `--v` and the other klog flags | `0` | verbosity |",
		"",
		"## next",
		"| flag | default | meaning |",
		"|---|---|---|",
		"| `--elsewhere` | | another section |",
	}, "\n")
	documented, klogRow, err := tableFlags(doc, "## `x`")
	if err != nil {
		t.Fatal(err)
	}
	if !klogRow || len(documented) != 5 {
		t.Fatalf("documented = %v, klog row %v", documented, klogRow)
	}
	keyed := map[string]definedFlag{}
	for name, f := range defined {
		keyed["--"+name] = f
	}
	got := compareFlags(flagTable{bin: "x", heading: "## `x`"}, keyed, documented, nil, klogRow, map[string]bool{"v": true, "vmodule": true})
	want := []string{
		`docs/configuration.md (## ` + "`x`" + `): x defines --hold, which the table does not list`,
		`docs/configuration.md:7: x --timeout: the table says the default is "2m", the code's is "1m0s"`,
		`docs/configuration.md:8: x does not define --gone`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("compareFlags =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnmarkedBlocks checks the marker rule on a page of docs/ (here an ADR, in a
// subdirectory): a read-only block and marked blocks pass, a block that changes something
// without a marker is reported.
func TestUnmarkedBlocks(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs", "adr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", "install.md"), []byte("```sh\nkubectl get pods\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	page := strings.Join([]string{
		"```sh",
		"kubectl -n <ns> get pods   # reads",
		"kubectl -n <ns> rollout status \\",
		"  daemonset/s3-csi-node",
		"```",
		"<!-- not run: on a node -->",
		"```sh",
		"rm -r --one-file-system /x",
		"```",
		"<!-- steps: upgrade-1x -->",
		"```sh",
		"helm upgrade r c",
		"```",
		"```yaml",
		"a: b",
		"```",
		"```sh",
		"kubectl label node n x=y",
		"```",
		"<!-- not run: -->",
		"```sh",
		"umount /x",
		"```",
	}, "\n")
	if err := os.WriteFile(filepath.Join(root, "docs", "adr", "0001-x.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := unmarkedBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.Contains(got[0], "docs/adr/0001-x.md:17:") || !strings.Contains(got[1], "docs/adr/0001-x.md:21:") {
		t.Errorf("unmarked blocks = %q, want the label block (line 17) and the one whose marker has no reason (line 21)", got)
	}
}

// TestWorkloadNames checks that a workload or app label the chart does not render is reported,
// in the docs and in the code's strings, and those it renders are not.
func TestWorkloadNames(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) { writeFile(t, root, rel, content) }
	write("charts/scality-s3-csi-driver/templates/r.yaml", "kind: Deployment\nmetadata:\n  name: s3-pod-reconciler\n  labels:\n    app: s3-pod-reconciler\n")
	write("docs/a.md", "`kubectl logs deploy/s3-pod-reconciler` and `-l app=s3-pod-reconciler`; not `ds/s3-gone`\n")
	write("README.md", "\n")
	got, err := checkWorkloadNames(root, []string{"check the controller (kubectl logs -l app=s3-elsewhere)"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.Contains(got[0], "app=s3-elsewhere") || !strings.Contains(got[1], "docs/a.md:1: ds/s3-gone") {
		t.Errorf("checkWorkloadNames = %q", got)
	}
}

// writeFile writes content at rel below root, making its directories.
func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
