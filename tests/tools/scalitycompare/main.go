// Command scalitycompare checks tests/scality's reproduction of Scality's chart against the
// real one: for each release, it renders Scality's chart at that tag (taken from a copy of
// github.com/scality/mountpoint-s3-csi-driver and packaged as Scality's release workflow does)
// and the reproduction (scality.Chart) with the same values, and reports every object and field
// that differ. It renders only, with helm template: nothing of Scality's is built or run, and
// nothing is written outside a temporary directory.
//
//	go run ./tools/scalitycompare -repo <git dir of scality/mountpoint-s3-csi-driver> [-helm bin/helm]
//
// It exits 1 when any rendering differs. The CI machine has no copy of that repository, so
// `make test` does not run it; docs/development.md says when to.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/tests/scality"
)

func main() {
	repo := flag.String("repo", "", "git directory of a copy of github.com/scality/mountpoint-s3-csi-driver with its release tags")
	helm := flag.String("helm", "bin/helm", "the helm binary")
	flag.Parse()
	if *repo == "" {
		fmt.Fprintln(os.Stderr, "scalitycompare: -repo is required")
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp("", "scalitycompare-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	bad := 0
	for _, r := range scality.Releases {
		real, err := realChart(*repo, *helm, tmp, r)
		if err != nil {
			fail(fmt.Errorf("%s: %w", r, err))
		}
		fixture, err := scality.Chart(filepath.Join(tmp, "fixture"), r)
		if err != nil {
			fail(err)
		}
		for _, c := range cases(r) {
			want, err := render(*helm, real, c)
			if err != nil {
				fail(fmt.Errorf("%s %s: Scality's chart: %w", r, c.name, err))
			}
			got, err := render(*helm, fixture, c)
			if err != nil {
				fail(fmt.Errorf("%s %s: the reproduction: %w", r, c.name, err))
			}
			diffs := compare(want, got)
			fmt.Printf("%s %-22s %d objects: %s\n", r, c.name, len(want), verdict(diffs))
			for _, d := range diffs {
				fmt.Println("    " + d)
			}
			if len(diffs) > 0 {
				bad++
			}
		}
	}
	if bad > 0 {
		fmt.Printf("%d renderings differ\n", bad)
		os.Exit(1)
	}
}

func verdict(d []string) string {
	if len(d) == 0 {
		return "identical"
	}
	return fmt.Sprintf("%d differences", len(d))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scalitycompare:", err)
	os.Exit(2)
}

// realChart extracts the release's chart from the repository and packages it as Scality's
// release workflow does (helm package --version <tag> --app-version <tag>); it returns the
// package's path.
func realChart(repo, helm, tmp string, r scality.Release) (string, error) {
	dir := filepath.Join(tmp, "real-"+string(r))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tarball, err := exec.Command("git", "--git-dir="+repo, "archive", string(r), "charts/"+scality.ChartName).Output()
	if err != nil {
		return "", fmt.Errorf("git archive %s: %w", r, err)
	}
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stdin = bytes.NewReader(tarball)
	if out, err := untar.CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %w: %s", err, out)
	}
	out, err := exec.Command(helm, "package", filepath.Join(dir, "charts", scality.ChartName), "--version", string(r), "--app-version", string(r), "-d", dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("helm package: %w: %s", err, out)
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%s.tgz", scality.ChartName, r)), nil
}

// renderCase is one helm template invocation: a release name and values.
type renderCase struct {
	name, release string
	values        map[string]any
}

// cases are the values each release is compared with: its defaults, a typical user's, and
// values that reach every conditional of the templates.
func cases(r scality.Release) []renderCase {
	user := scality.UserValues(r, "https://s3.ring.example.com", "ring-1", "ring-credentials")
	everything := scality.Merge(user, map[string]any{
		"nameOverride":     "s3",
		"imagePullSecrets": []any{"registry-a", "registry-b"},
		"customLabels":     map[string]any{"team": "storage"},
		"image":            map[string]any{"containerRegistry": "registry.example.com/", "tag": "", "pullPolicy": "Always"},
		"node": map[string]any{
			"kubeletPath": "/var/lib/k0s/kubelet", "logLevel": 2, "nodeSelector": map[string]any{"disk": "ssd"},
			"tolerations":          []any{map[string]any{"key": "storage", "operator": "Exists"}},
			"affinity":             map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "s3", "operator": "Exists"}}}}}}},
			"serviceAccount":       map[string]any{"annotations": map[string]any{"a": "b"}, "automountServiceAccountToken": true},
			"volumes":              []any{map[string]any{"name": "extra", "emptyDir": map[string]any{}}},
			"podInfoOnMountCompat": map[string]any{"enable": true}, "mountpointVersion": "1.19.0",
		},
		"sidecars":   map[string]any{"livenessProbe": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "32Mi"}}}},
		"controller": map[string]any{"nodeSelector": map[string]any{"role": "infra"}, "tolerations": []any{map[string]any{"operator": "Exists"}}, "serviceAccount": map[string]any{"annotations": map[string]any{"c": "d"}}},
	})
	cs := []renderCase{
		{"defaults", "scality", nil},
		{"user", "scality", user},
		{"everything", "scality", everything},
		{"tolerate-all", "kustomize", scality.Merge(user, map[string]any{"node": map[string]any{"tolerateAllTaints": true, "serviceAccount": map[string]any{"create": false}}, "controller": map[string]any{"serviceAccount": map[string]any{"create": false}}})},
		{"no-default-tolerations", "scality", scality.Merge(user, map[string]any{"node": map[string]any{"defaultTolerations": false}})},
	}
	if r == scality.R120 {
		cs = append(cs, renderCase{"controller-off", "scality", scality.Merge(user, map[string]any{"controller": map[string]any{"enable": false}})})
	}
	if r.TLS() {
		cs = append(cs,
			renderCase{"tls-helm-managed", "scality", scality.Merge(user, map[string]any{"tls": map[string]any{"caCertConfigMap": "ring-ca", "caCertData": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"}})},
			renderCase{"tls-own-configmap", "scality", scality.Merge(user, map[string]any{"tls": map[string]any{"caCertConfigMap": "ring-ca"}})})
	}
	return cs
}

// render runs helm template on a chart with the case's values, CRDs included, for Kubernetes
// 1.33, and returns the objects by kind/namespace/name.
func render(helm, chart string, c renderCase) (map[string]map[string]any, error) {
	args := []string{"template", c.release, chart, "-n", "kube-system", "--include-crds", "--kube-version", "1.33.0"}
	if c.values != nil {
		b, err := sigsyaml.Marshal(c.values)
		if err != nil {
			return nil, err
		}
		f, err := os.CreateTemp("", "values-*.yaml")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		if _, err := f.Write(b); err != nil {
			return nil, err
		}
		f.Close()
		args = append(args, "-f", f.Name())
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v/%v", o["kind"], meta["namespace"], meta["name"])
		objs[key] = normalize(o).(map[string]any)
	}
	return objs, nil
}

// normalize drops what the API server drops or what is not reproduced: null fields, and prose
// (the descriptions of priority classes and of a CRD's schema and printer columns: mutable, no
// effect on an upgrade).
func normalize(v any) any {
	return dropProse(v, false)
}

func dropProse(v any, inCRD bool) any {
	switch t := v.(type) {
	case map[string]any:
		if t["kind"] == "CustomResourceDefinition" {
			inCRD = true
		}
		out := map[string]any{}
		for k, x := range t {
			if x == nil || (inCRD && k == "description") {
				continue
			}
			out[k] = dropProse(x, inCRD)
		}
		if out["kind"] == "PriorityClass" {
			delete(out, "description")
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = dropProse(x, inCRD)
		}
		return out
	default:
		return v
	}
}

// compare lists the objects only one side has and, for the others, each field path whose
// values differ.
func compare(want, got map[string]map[string]any) []string {
	var out []string
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		w, okw := want[k]
		g, okg := got[k]
		switch {
		case !okg:
			out = append(out, k+": missing from the reproduction")
		case !okw:
			out = append(out, k+": not rendered by Scality's chart")
		default:
			out = append(out, fieldDiffs(k, w, g)...)
		}
	}
	return out
}

func fieldDiffs(path string, w, g any) []string {
	wm, wok := w.(map[string]any)
	gm, gok := g.(map[string]any)
	if wok && gok {
		var out []string
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		var sorted []string
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			out = append(out, fieldDiffs(path+"."+k, wm[k], gm[k])...)
		}
		return out
	}
	wl, wok := w.([]any)
	gl, gok := g.([]any)
	if wok && gok && len(wl) == len(gl) {
		var out []string
		for i := range wl {
			out = append(out, fieldDiffs(fmt.Sprintf("%s[%d]", path, i), wl[i], gl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(w, g) {
		return nil
	}
	return []string{fmt.Sprintf("%s: Scality %s, reproduction %s", path, brief(w), brief(g))}
}

func brief(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, _ := sigsyaml.Marshal(v)
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
