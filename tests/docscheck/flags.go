package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// flagTable names the section of docs/configuration.md that documents one binary's flags: the
// first table under the heading whose first header cell is "flag". sub lists the subcommands
// whose flag sets are separate (scality-fuse-helper mount, bind, ensure-user); their table rows
// name a flag as `<subcommand> --<flag>`. subset: the table documents some of the binary's flags
// only (the controller mode of the node plugin's binary), so only the other direction is checked.
type flagTable struct {
	bin, heading string
	sub          []string
	subset       bool
}

// flagTables are the flag tables of docs/configuration.md. Every directory of cmd/ must have
// one (a new binary gets its table), checked by checkFlags.
var flagTables = []flagTable{
	{bin: "scality-s3-csi-driver", heading: "## `scality-s3-csi-driver`"},
	{bin: "scality-s3-csi-driver", heading: "## Controller mode", subset: true},
	{bin: "scality-csi-controller", heading: "## `scality-csi-controller`"},
	{bin: "scality-csi-mounter", heading: "## `scality-csi-mounter`"},
	{bin: "install-mp", heading: "## `install-mp`"},
	{bin: "scality-fuse-helper", heading: "## `scality-fuse-helper`", sub: []string{"mount", "bind", "umount", "ensure-user"}},
}

// definedFlag is one flag a binary defines, as its -h prints it.
type definedFlag struct {
	name, typ, def string
}

var (
	flagLine    = regexp.MustCompile(`^  -([A-Za-z0-9_-]+)(?: (\S+))?$`)
	defaultText = regexp.MustCompile(`\(default (.+)\)$`)
)

// parseHelp returns the flags of a Go flag set's usage output (flag.PrintDefaults: a line
// "  -name type" and indented usage lines, the last ending in "(default X)" unless the default
// is the zero value; X is quoted for string flags).
func parseHelp(out string) map[string]definedFlag {
	flags := map[string]definedFlag{}
	var cur *definedFlag
	flush := func() {
		if cur != nil {
			flags[cur.name] = *cur
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flush()
			cur = &definedFlag{name: m[1], typ: m[2]}
			continue
		}
		if cur == nil || !strings.HasPrefix(line, "    \t") {
			continue
		}
		if m := defaultText.FindStringSubmatch(line); m != nil {
			d := m[1]
			if cur.typ == "string" {
				if !strings.HasPrefix(d, `"`) || !strings.HasSuffix(d, `"`) {
					continue // "(default $CSI_NODE_NAME)" in the usage text, not Go's default
				}
				d = strings.Trim(d, `"`)
			}
			cur.def = d
		}
	}
	flush()
	return flags
}

// documentedFlag is one flag a table row names, the row's default cell and its line.
type documentedFlag struct {
	def  string
	line int
}

var flagCell = regexp.MustCompile(`^(?:([a-z][a-z-]*) )?--([A-Za-z0-9_-]+)$`)

// tableFlags returns the flags of the first flag table below heading in doc (keys "--name", or
// "sub --name" for a subcommand's), and whether the table says the klog flags are there too.
func tableFlags(doc, heading string) (map[string]documentedFlag, bool, error) {
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	flags := map[string]documentedFlag{}
	in, table, done, klogRow := false, false, false, false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			if in {
				done = true
			}
			in = strings.HasPrefix(line, heading)
		case !in || done:
		case !strings.HasPrefix(line, "|"):
			if table {
				done = true
			}
		default:
			cells := strings.Split(strings.Trim(line, "|"), "|")
			first := strings.TrimSpace(cells[0])
			if !table {
				table = strings.EqualFold(first, "flag")
				continue
			}
			if strings.HasPrefix(first, "---") {
				continue
			}
			def := ""
			if len(cells) > 1 {
				def = strings.TrimSpace(cells[1])
			}
			if strings.Contains(first, "klog flags") {
				klogRow = true
			}
			for _, m := range backticked.FindAllStringSubmatch(first, -1) {
				if f := flagCell.FindStringSubmatch(m[1]); f != nil {
					key := "--" + f[2]
					if f[1] != "" {
						key = f[1] + " " + key
					}
					flags[key] = documentedFlag{def: def, line: n}
				}
			}
		}
	}
	if !table {
		return nil, false, fmt.Errorf("docs/configuration.md: no flag table under %q", heading)
	}
	return flags, klogRow, sc.Err()
}

// klogFlags are the flags klog.InitFlags defines, which every binary but scality-fuse-helper
// has; a table covers them with a row naming `--v` and saying "klog flags".
func klogFlags() map[string]bool {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	out := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	return out
}

// sameDefault reports whether a table's default and the code's are the same value: every
// spelling of zero is one, and durations compare as durations (1m and 1m0s).
func sameDefault(doc, code string) bool {
	norm := func(s string) string {
		switch s {
		case "", "0", "false", "0s":
			return ""
		}
		if d, err := time.ParseDuration(s); err == nil {
			return d.String()
		}
		return s
	}
	return norm(doc) == norm(code)
}

// compareFlags lists what differs between the flags a binary defines (keys as tableFlags
// makes them) and its table: a flag missing from the table (and from the binary's other
// tables, covered), a row naming no flag of the binary, and a default cell that is one literal (`X`) or "(none…" and disagrees with Go's
// default. Defaults of environment variables (`$NAME`) are not compared: the binaries run
// with an empty environment here.
func compareFlags(t flagTable, defined map[string]definedFlag, documented map[string]documentedFlag, covered map[string]bool, klogRow bool, klogNames map[string]bool) []string {
	var out []string
	where := fmt.Sprintf("docs/configuration.md (%s)", t.heading)
	var keys []string
	for k := range defined {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := k[strings.Index(k, "--")+2:]
		d, ok := documented[k]
		if !ok {
			if t.subset || covered[k] || (klogRow && klogNames[name] && name != "v") {
				continue
			}
			out = append(out, fmt.Sprintf("%s: %s defines %s, which the table does not list", where, t.bin, k))
			continue
		}
		def := d.def
		switch {
		case strings.HasPrefix(def, "(none"):
			if !sameDefault("", defined[k].def) {
				out = append(out, fmt.Sprintf("docs/configuration.md:%d: %s %s: the table says (none), the code's default is %q", d.line, t.bin, k, defined[k].def))
			}
		case strings.Count(def, "`") == 2 && strings.HasPrefix(def, "`") && strings.HasSuffix(def, "`") && !strings.HasPrefix(def, "`$"):
			if lit := strings.Trim(def, "`"); !sameDefault(lit, defined[k].def) {
				out = append(out, fmt.Sprintf("docs/configuration.md:%d: %s %s: the table says the default is %q, the code's is %q", d.line, t.bin, k, lit, defined[k].def))
			}
		}
	}
	var docKeys []string
	for k := range documented {
		docKeys = append(docKeys, k)
	}
	sort.Strings(docKeys)
	for _, k := range docKeys {
		if _, ok := defined[k]; !ok {
			out = append(out, fmt.Sprintf("docs/configuration.md:%d: %s does not define %s", documented[k].line, t.bin, k))
		}
	}
	return out
}

// checkFlags builds every binary of cmd/, runs each with -h (and each subcommand's -h) in an
// empty environment, and compares the flags it defines with its table in docs/configuration.md.
func checkFlags(root, goBin string) ([]string, error) {
	dirs, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, d := range dirs {
		if d.IsDir() && !slices.ContainsFunc(flagTables, func(t flagTable) bool { return t.bin == d.Name() }) {
			problems = append(problems, fmt.Sprintf("cmd/%s has no flag table in docs/configuration.md (add one, and its entry in tests/docscheck's flagTables)", d.Name()))
		}
	}
	tmp, err := os.MkdirTemp("", "docscheck-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	build := exec.Command(goBin, "build", "-o", tmp+string(filepath.Separator), "./cmd/...") //nolint:gosec // the repository's own binaries
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
	}
	docBytes, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md")) //nolint:gosec // G304: the repository's own documentation
	if err != nil {
		return nil, err
	}
	klogNames := klogFlags()
	covered := map[string]map[string]bool{} // the flags each binary's tables name together
	tables := make([]map[string]documentedFlag, len(flagTables))
	klogRows := make([]bool, len(flagTables))
	for i, t := range flagTables {
		documented, klogRow, err := tableFlags(string(docBytes), t.heading)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		tables[i], klogRows[i] = documented, klogRow
		if covered[t.bin] == nil {
			covered[t.bin] = map[string]bool{}
		}
		for k := range documented {
			covered[t.bin][k] = true
		}
	}
	for i, t := range flagTables {
		if tables[i] == nil {
			continue
		}
		defined := map[string]definedFlag{}
		runs := [][]string{{"-h"}}
		if len(t.sub) > 0 {
			runs = nil
			for _, s := range t.sub {
				runs = append(runs, []string{s, "-h"})
			}
		}
		for _, args := range runs {
			cmd := exec.Command(filepath.Join(tmp, t.bin), args...) //nolint:gosec // the binary just built
			cmd.Env = []string{}
			out, _ := cmd.CombinedOutput() // -h exits 0 or 2 depending on the flag set's policy
			parsed := parseHelp(string(out))
			if len(parsed) == 0 {
				return nil, fmt.Errorf("%s %s printed no flags:\n%s", t.bin, strings.Join(args, " "), out)
			}
			for name, f := range parsed {
				key := "--" + name
				if len(args) == 2 {
					key = args[0] + " " + key
				}
				defined[key] = f
			}
		}
		problems = append(problems, compareFlags(t, defined, tables[i], covered[t.bin], klogRows[i], klogNames)...)
	}
	return problems, nil
}
