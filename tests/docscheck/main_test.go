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
