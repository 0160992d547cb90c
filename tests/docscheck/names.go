package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// workloadRef is how the docs and the code's messages name the chart's workloads to users:
// `kubectl logs deploy/<name>`, `rollout status daemonset/<name>`, `-l app=<name>`.
var workloadRef = regexp.MustCompile("(?:^|[\\s`(])((?:deploy|deployment|ds|daemonset)/|app=)([a-z][a-z0-9-]*)")

// checkWorkloadNames lists the workloads and app labels docs/*.md, README.md and the code's
// strings name that the chart does not render: a Deployment or DaemonSet is named in a
// template (`name: <name>`), an app label is set there (`app: <name>`, or the selector helper's
// `"name" "<name>"`). A log command aimed at a workload or label that does not exist (the Pod
// Reconciler looked for under the CSI controller's name) fails here.
func checkWorkloadNames(root string, codeStrings []string) ([]string, error) {
	var chart strings.Builder
	tmpl, err := filepath.Glob(filepath.Join(root, "charts", "scality-s3-csi-driver", "templates", "*"))
	if err != nil {
		return nil, err
	}
	for _, p := range tmpl {
		b, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own chart
		if err != nil {
			return nil, err
		}
		chart.Write(b)
	}
	rendered := chart.String()
	known := func(kind, name string) bool {
		if kind == "app=" {
			return strings.Contains(rendered, "app: "+name+"\n") || strings.Contains(rendered, `"name" "`+name+`"`)
		}
		return strings.Contains(rendered, "name: "+name+"\n")
	}
	found := map[string]string{} // reference -> where
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range append(docs, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own documentation
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range workloadRef.FindAllStringSubmatch(line, -1) {
				if !known(m[1], m[2]) {
					found[m[1]+m[2]] = fmt.Sprintf("%s:%d", rel, i+1)
				}
			}
		}
	}
	for _, s := range codeStrings {
		for _, m := range workloadRef.FindAllStringSubmatch(s, -1) {
			if !known(m[1], m[2]) {
				found[m[1]+m[2]] = fmt.Sprintf("a string of the code (%q)", s)
			}
		}
	}
	var out []string
	for ref, where := range found {
		out = append(out, fmt.Sprintf("%s: %s names a workload or app label the chart does not render", where, ref))
	}
	sort.Strings(out)
	return out, nil
}
