package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// schemaNode is the part of values.schema.json the documentation is made from; properties keep
// their order, which is the order of the documentation.
type schemaNode struct {
	Type        schemaType  `json:"type"`
	Description string      `json:"description"`
	Ref         string      `json:"$ref"`
	Pattern     string      `json:"pattern"`
	Enum        []any       `json:"enum"`
	Items       *schemaNode `json:"items"`
	Properties  properties  `json:"properties"`
	// Deprecated marks a 1.x chart value the schema lets through only for the chart to refuse
	// it with what to use instead: not documented as a value, no default.
	Deprecated bool `json:"deprecated"`
}

// schemaType is a node's type: a name, or a list of names of which "null" (a value that may be
// left unset) is not documented as a type; several others are documented as "a or b".
type schemaType string

func (s *schemaType) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = schemaType(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	many = slices.DeleteFunc(many, func(t string) bool { return t == "null" })
	if len(many) == 0 {
		return fmt.Errorf("type %s: a type besides null is needed", b)
	}
	*s = schemaType(strings.Join(many, " or "))
	return nil
}

type properties struct {
	names []string
	nodes map[string]*schemaNode
}

func (p *properties) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	p.nodes = map[string]*schemaNode{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string)
		var n schemaNode
		if err := dec.Decode(&n); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		p.names = append(p.names, name)
		p.nodes[name] = &n
	}
	_, err := dec.Token() // }
	return err
}

// valuesDoc renders the "Helm values" section of docs/configuration.md from the chart's
// schema (descriptions, types) and values.yaml (defaults).
func valuesDoc(t *testing.T) string {
	t.Helper()
	// The values' schema is $defs.values (the root checks it when chartDefaults is this chart's).
	var root struct {
		Defs map[string]schemaNode `json:"$defs"`
	}
	b, err := os.ReadFile(filepath.Join(harness.ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	vb, err := os.ReadFile(filepath.Join(harness.ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}

	typeOf := func(n *schemaNode) string {
		switch {
		case n.Ref == "#/$defs/tolerations":
			return "list of tolerations"
		case n.Ref == "#/$defs/resources":
			return "resources"
		case n.Ref == "#/$defs/stringMap":
			return "map of strings"
		case n.Type == "array" && n.Items != nil:
			return typeName(root.Defs, n)
		case n.Ref == "#/$defs/duration":
			return "duration"
		}
		if n.Ref != "" {
			return typeName(root.Defs, n)
		}
		return string(n.Type)
	}

	var out strings.Builder
	out.WriteString("## Helm values\n\n")
	out.WriteString("Every value of the chart `charts/scality-s3-csi-driver` (installation: [install.md](install.md)).\n")
	out.WriteString("`values.schema.json` refuses unknown keys, wrong types and unknown modes. This section is\n")
	out.WriteString("generated from the schema's descriptions and the defaults in `values.yaml`\n")
	out.WriteString("(`make helm-golden`); `make test` fails when it is stale.\n")
	var walk func(prefix string, props properties, vals map[string]any)
	walk = func(prefix string, props properties, vals map[string]any) {
		for _, name := range props.names {
			n := props.nodes[name]
			path := prefix + name
			if n.Deprecated {
				continue
			}
			v, ok := vals[name]
			if !ok {
				t.Errorf("values.yaml has no default for %s", path)
			}
			if n.Description == "" {
				t.Errorf("values.schema.json: %s has no description", path)
			}
			if len(n.Properties.names) > 0 {
				sub, _ := v.(map[string]any)
				if prefix == "" {
					fmt.Fprintf(&out, "\n### `%s`\n\n%s\n\n| value | type | default | meaning |\n|---|---|---|---|\n", path, n.Description)
				} else {
					fmt.Fprintf(&out, "| `%s` | object | | %s |\n", path, cell(n.Description))
				}
				walk(path+".", n.Properties, sub)
				continue
			}
			if prefix == "" {
				fmt.Fprintf(&out, "\n### `%s`\n\n| value | type | default | meaning |\n|---|---|---|---|\n", path)
			}
			def, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "| `%s` | %s | `%s` | %s |\n", path, typeOf(n), cell(string(def)), cell(n.Description))
		}
		for name := range vals {
			if _, ok := props.nodes[name]; !ok {
				t.Errorf("values.yaml sets %s%s, which the schema does not describe", prefix, name)
			}
		}
	}
	walk("", root.Defs["values"].Properties, values)
	return out.String()
}

// typeName is a schema node's type, or its enum's values.
func typeName(defs map[string]schemaNode, n *schemaNode) string {
	if n.Ref != "" {
		def := defs[strings.TrimPrefix(n.Ref, "#/$defs/")]
		if len(def.Enum) > 0 {
			var alts []string
			for _, e := range def.Enum {
				alts = append(alts, fmt.Sprintf("`%v`", e))
			}
			return strings.Join(alts, " \\| ")
		}
		return string(def.Type)
	}
	if n.Type == "array" && n.Items != nil {
		return "list of " + typeName(defs, n.Items)
	}
	if n.Type == "string" {
		return "strings" // only reached for list items
	}
	return string(n.Type)
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

// TestValuesDoc keeps the "Helm values" section of docs/configuration.md equal to what the
// chart's schema and values.yaml say. With -update it rewrites the section (appending it when
// missing); the section runs from its heading to the next "## " heading or the end.
func TestValuesDoc(t *testing.T) {
	want := valuesDoc(t)
	docPath := filepath.Join(harness.RepoRoot(), "docs", "configuration.md")
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const heading = "\n## Helm values\n"
	start := strings.Index(doc, heading)
	var before, got, after string
	if start < 0 {
		before, after = strings.TrimRight(doc, "\n")+"\n", ""
	} else {
		before = strings.TrimRight(doc[:start], "\n") + "\n" // one blank line before the heading, however many there were
		rest := doc[start+1:]
		end := strings.Index(rest[len(heading)-1:], "\n## ")
		if end < 0 {
			got = rest
		} else {
			got, after = rest[:len(heading)-1+end+1], rest[len(heading)-1+end+1:]
		}
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(before+"\n"+want+strings.TrimPrefix(after, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if start < 0 {
		t.Fatalf("docs/configuration.md has no %q section; run `make helm-golden`", strings.TrimSpace(heading))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/configuration.md's Helm values are stale (run `make helm-golden`) (-generated +doc):\n%s", diff)
	}
}

// TestChartCRDCopy checks that the chart's CRD files are byte-for-byte the ones in crd/ (make
// chart-crd copies them; make verify also fails on drift).
func TestChartCRDCopy(t *testing.T) {
	canon, _ := filepath.Glob(filepath.Join(harness.RepoRoot(), "crd", "*.yaml"))
	copies, _ := filepath.Glob(filepath.Join(harness.ChartDir(), "files", "crds", "*.yaml"))
	names := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if diff := cmp.Diff(names(canon), names(copies)); diff != "" {
		t.Fatalf("chart CRD files differ from crd/ (run make chart-crd) (-crd/ +chart):\n%s", diff)
	}
	for i := range canon {
		a, _ := os.ReadFile(canon[i])
		b, _ := os.ReadFile(copies[i])
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run make chart-crd", copies[i], canon[i])
		}
	}
}
