package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Every page of docs/ (and its subdirectories, the ADRs among them) holds to this: each shell
// block either runs in the suites or says why not (the convention of docs/upgrade.md,
// extended). A block of read-only kubectl and helm commands only is run by tests/cluster
// (doccommands_test.go); any other is preceded by `<!-- steps: NAME -->` (tests/cluster runs it
// as it is, docsteps_test.go) or by `<!-- not run: REASON -->`.

// markedDocs returns the Markdown pages below root/docs, relative to it, in a stable order.
func markedDocs(root string) ([]string, error) {
	var out []string
	dir := filepath.Join(root, "docs")
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

var (
	fenceOpen  = regexp.MustCompile("^```(sh|bash|shell|console)\\s*$")
	blockMark  = regexp.MustCompile(`^<!-- (steps: \S+|not run: \S.*) -->$`)
	commentCut = regexp.MustCompile(`\s+#\s.*$`)
)

// readOnlyCommand reports whether line is a kubectl or helm command that only reads, as
// tests/cluster's readOnly decides it (flags and -n values skipped, the first word is the verb).
func readOnlyCommand(line string) bool {
	args := strings.Fields(line)
	if len(args) < 2 || (args[0] != "kubectl" && args[0] != "helm") {
		return false
	}
	verb := ""
	for i := 1; i < len(args); i++ {
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
	if args[0] == "kubectl" {
		switch verb {
		case "get", "describe", "logs", "rollout status", "api-resources", "explain", "version":
			return true
		}
		return false
	}
	switch verb {
	case "get", "status", "history", "list":
		return true
	}
	return false
}

// unmarkedBlocks lists the shell blocks of the pages of docs/ that neither only read nor carry
// a marker.
func unmarkedBlocks(root string) ([]string, error) {
	pages, err := markedDocs(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range pages {
		p := filepath.Join(root, "docs", name)
		f, err := os.Open(p) //nolint:gosec // G304: the repository's own documentation
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		prev, in, start, marked, readOnly, pending := "", false, 0, false, true, ""
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			switch {
			case !in && fenceOpen.MatchString(line):
				in, start, marked, readOnly, pending = true, n, blockMark.MatchString(prev), true, ""
			case in && strings.HasPrefix(line, "```"):
				in = false
				if !marked && !readOnly {
					out = append(out, fmt.Sprintf("docs/%s:%d: a shell block that changes something, with no <!-- steps: NAME --> or <!-- not run: REASON --> line before it", name, start))
				}
			case in:
				cmd := strings.TrimSpace(commentCut.ReplaceAllString(line, ""))
				if cmd == "" || strings.HasPrefix(cmd, "#") {
					continue
				}
				pending += strings.TrimSuffix(cmd, "\\")
				if strings.HasSuffix(cmd, "\\") {
					pending += " "
					continue
				}
				if !readOnlyCommand(pending) {
					readOnly = false
				}
				pending = ""
			}
			if line != "" {
				prev = line
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
