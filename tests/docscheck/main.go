// Command docscheck fails when the documentation drifts from the code (make verify runs it):
//
//   - every message quoted in docs/troubleshooting.md (a backticked text in the first column
//     of a table whose first header is "message…") is one the code can emit: each of its fixed
//     pieces occurs in a string the code holds (the driver's Go sources, the chart's templates
//     and schema, and the mount-s3 stand-in, which prints mount-s3's own messages), or in the
//     short list of texts other programs print (kernel, kubelet, umount);
//   - every relative link of every Markdown file of the repository resolves to a file or
//     directory inside the repository;
//   - docs/monitoring.md lists every s3csi_ metric the code registers and every alert of the
//     chart's alerts.yaml, and names no s3csi_ metric the code lacks; every alert's runbook_url
//     is a heading of docs/troubleshooting.md (monitoring.go).
//   - every flag each binary of cmd/ defines (as its -h prints it, after go build) is in its
//     table in docs/configuration.md and every flag a table names is defined, and a default
//     the table gives as one literal or "(none)" is the code's (flags.go);
//   - docs/compatibility.md names the versions tools.mk, the Dockerfile and the chart pin
//     (versions.go);
//   - in every page of docs/, every shell block only reads (tests/cluster runs it) or
//     carries a <!-- steps: NAME --> or <!-- not run: REASON --> line (markers.go);
//   - every deploy/<name>, daemonset/<name> and app=<name> the docs and the code's strings
//     give users names a workload or label the chart renders (names.go).
//
// A quoted message marks what the code fills in with <placeholder> or "…" (a word holding
// either is a value; "…" alone is any text) or a double-quoted example (the code quotes values
// with %q); texts of other programs (the list below) count as values too. The fixed pieces are
// the rest, cut where the code joins wrapped errors (": ", "; ").
//
// Usage: docscheck [-root DIR] [-go GO] (default: the repository root above this module, and
// the go command on PATH, which builds the binaries).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// external are texts that reach the documented messages from other programs.
var external = []string{
	"Transport endpoint is not connected", // the kernel, for a dead FUSE mount
	"Read-only file system",               // the kernel
	"Permission denied",                   // the kernel and mount-s3 (EACCES)
	"target is busy",                      // umount(8)
	"ImagePullBackOff",                    // kubelet's waiting reason
	"Unschedulable",                       // the scheduler's condition reason
	"Pending",                             // a pod phase
	// mount-s3 (the CRT's error for a failed TLS negotiation)
	"CRT error 1029: aws-c-io: AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE, TLS (SSL) negotiation failed",
}

func main() {
	root := flag.String("root", "..", "repository root")
	goBin := flag.String("go", "go", "the go command that builds the binaries of cmd/")
	flag.Parse()
	var problems []string
	texts, err := codeTexts(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	msgs, err := quotedMessages(filepath.Join(*root, "docs", "troubleshooting.md"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	for _, m := range msgs {
		for _, piece := range pieces(m.text) {
			if !emitted(piece, texts) {
				problems = append(problems, fmt.Sprintf("docs/troubleshooting.md:%d: %q is not in any message the code emits (from %q)", m.line, piece, m.text))
			}
		}
	}
	for _, check := range []func() ([]string, error){
		func() ([]string, error) { return brokenLinks(*root) },
		func() ([]string, error) { return checkFlags(*root, *goBin) },
		func() ([]string, error) { return checkVersions(*root) },
		func() ([]string, error) { return unmarkedBlocks(*root) },
		func() ([]string, error) { return checkWorkloadNames(*root, texts) },
		func() ([]string, error) { return monitoringDrift(*root) },
	} {
		found, err := check()
		if err != nil {
			fmt.Fprintln(os.Stderr, "docscheck:", err)
			os.Exit(2)
		}
		problems = append(problems, found...)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("docscheck: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	fmt.Printf("docscheck: %d quoted messages, the links of every Markdown file, the flag tables of %d binaries, the metrics and the alerts are consistent with the code\n", len(msgs), len(flagTables))
}

// message is one quoted message of the troubleshooting guide.
type message struct {
	text string
	line int
}

var backticked = regexp.MustCompile("`([^`]+)`")

// quotedMessages returns the backticked texts of the first column of every table whose first
// header cell starts with "message".
func quotedMessages(path string) ([]message, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the repository's own documentation
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []message
	inTable := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		switch {
		case strings.HasPrefix(strings.ToLower(first), "message"):
			inTable = true
		case !inTable || strings.HasPrefix(first, "---"):
		default:
			for _, m := range backticked.FindAllStringSubmatch(first, -1) {
				out = append(out, message{text: m[1], line: n})
			}
		}
	}
	return out, sc.Err()
}

var (
	quoted      = regexp.MustCompile(`"[^"]*"`)
	placeholder = regexp.MustCompile(`<[^<>]*>`)
	separators  = regexp.MustCompile(`: |; `)
)

// pieces returns the fixed pieces of a quoted message (see the package comment).
func pieces(msg string) []string {
	msg = quoted.ReplaceAllString(msg, " … ")
	msg = placeholder.ReplaceAllString(msg, "…")
	for _, e := range external {
		msg = strings.ReplaceAll(msg, e, "…")
	}
	var out []string
	var run []string
	flush := func() {
		text := strings.Join(run, " ")
		run = nil
		for _, p := range separators.Split(text, -1) {
			p = strings.Trim(p, " :;,.()/")
			if len(p) >= 3 {
				out = append(out, p)
			}
		}
	}
	for _, w := range strings.Fields(msg) {
		if strings.Contains(w, "…") || strings.Contains(w, "...") {
			flush()
			continue
		}
		run = append(run, w)
	}
	flush()
	return out
}

// emitted reports whether piece occurs in one of the code's texts, or is made of the end of
// one text and the start of others joined where the code inserts a value (a wrapped error's
// text, say: "%w within %v").
func emitted(piece string, texts []string) bool {
	for _, t := range texts {
		if strings.Contains(t, piece) {
			return true
		}
	}
	return joined(piece, texts, true)
}

// joined reports whether piece is a suffix of a text (first: any text's end) followed by the
// starts of further texts, cut at spaces, each part at least three bytes long.
func joined(piece string, texts []string, first bool) bool {
	for _, t := range texts {
		if !first && strings.HasPrefix(t, piece) {
			return true
		}
	}
	for k := 3; k <= len(piece)-3; k++ {
		if piece[k] != ' ' && piece[k-1] != ' ' {
			continue
		}
		head, rest := strings.TrimSpace(piece[:k]), strings.TrimSpace(piece[k:])
		if len(head) < 3 || len(rest) < 3 {
			continue
		}
		for _, t := range texts {
			fits := strings.HasSuffix(t, head)
			if !first {
				fits = t == head
			}
			if fits && joined(rest, texts, false) {
				return true
			}
		}
	}
	return false
}

var (
	formatVerb  = regexp.MustCompile(`%[-+# 0-9.*]*[a-zA-Z%]`)
	space       = regexp.MustCompile(`\s+`)
	templateCut = regexp.MustCompile(`{{|}}|"`)
)

// codeTexts returns the fixed texts the code can print: the string literals of the driver's
// non-test Go sources and of the mount-s3 stand-in, cut at format verbs, and the chart's
// templates and schema, cut at template delimiters and quotes; whitespace is collapsed.
func codeTexts(root string) ([]string, error) {
	texts := append([]string(nil), external...)
	add := func(s string, cut *regexp.Regexp) {
		for _, part := range cut.Split(s, -1) {
			if part = strings.TrimSpace(space.ReplaceAllString(part, " ")); part != "" {
				texts = append(texts, part)
			}
		}
	}
	if err := eachStringLiteral(root, []string{"cmd", "pkg", "mounter", "crd", filepath.Join("tests", "mounts3")},
		func(s string) { add(s, formatVerb) }); err != nil {
		return nil, err
	}
	chart := filepath.Join(root, "charts", "scality-s3-csi-driver")
	err := filepath.WalkDir(chart, func(p string, d fs.DirEntry, err error) error {
		chartText := strings.Contains(p, "templates") || strings.HasSuffix(p, ".schema.json")
		if err != nil || d.IsDir() || !chartText {
			return err
		}
		b, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own chart
		if err != nil {
			return err
		}
		add(string(b), templateCut)
		return nil
	})
	return texts, err
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks lists the relative links of the repository's Markdown files (outside bin/, .git
// and the vendored wrapper modules) that do not resolve to a path inside the repository.
func brokenLinks(root string) ([]string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var out []string
	err = filepath.WalkDir(absRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own documentation
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(absRoot, p)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				if problem := checkLink(absRoot, filepath.Dir(p), m[1]); problem != "" {
					out = append(out, fmt.Sprintf("%s:%d: link %s: %s", rel, i+1, m[1], problem))
				}
			}
		}
		return nil
	})
	return out, err
}

// checkLink returns why target (a link in a file of dir) is broken, or "".
func checkLink(root, dir, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
		return ""
	}
	path, _, _ := strings.Cut(target, "#")
	if path == "" {
		return ""
	}
	abs := filepath.Clean(filepath.Join(dir, path))
	if filepath.IsAbs(path) {
		abs = filepath.Clean(path)
	}
	if abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
		return "leaves the repository"
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		return "no such file"
	} else if err != nil {
		return err.Error()
	}
	return ""
}

// eachStringLiteral calls f with every string literal of the non-test Go sources under the
// directories dirs of root (a directory the repository lacks is skipped).
func eachStringLiteral(root string, dirs []string, f func(string)) error {
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == filepath.Join(root, dir) {
				return nil // a tree the repository does not have (tests)
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			file, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						f(s)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
