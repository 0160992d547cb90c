package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// pinnedVersion is a version the repository pins in one file, which docs/compatibility.md must
// quote as it is.
type pinnedVersion struct {
	file string
	re   *regexp.Regexp
}

var pinnedVersions = []pinnedVersion{
	{"tools.mk", regexp.MustCompile(`(?m)^K8S_VERSION := (\S+)`)},
	{"tools.mk", regexp.MustCompile(`(?m)^HELM_VERSION := (\S+)`)},
	{"tools.mk", regexp.MustCompile(`(?m)^VERSITYGW_VERSION := (\S+)`)},
	{"Dockerfile", regexp.MustCompile(`(?m)^ARG MOUNTPOINT_VERSION=(\S+)`)},
	{filepath.Join("charts", "scality-s3-csi-driver", "Chart.yaml"), regexp.MustCompile(`(?m)^kubeVersion: "?([^"\n]+)"?`)},
}

// checkVersions lists the pinned versions docs/compatibility.md does not quote (a version bumped
// without the matrix following).
func checkVersions(root string) ([]string, error) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "compatibility.md")) //nolint:gosec // G304: the repository's own documentation
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pinnedVersions {
		b, err := os.ReadFile(filepath.Join(root, p.file)) //nolint:gosec // G304: the repository's own files
		if err != nil {
			return nil, err
		}
		m := p.re.FindSubmatch(b)
		if m == nil {
			out = append(out, fmt.Sprintf("%s: no match for %s (tests/docscheck/versions.go)", p.file, p.re))
			continue
		}
		if v := string(m[1]); !strings.Contains(string(doc), v) {
			out = append(out, fmt.Sprintf("docs/compatibility.md does not name %s, the version %s pins (%s)", v, p.file, p.re))
		}
	}
	return out, nil
}
