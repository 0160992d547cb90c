package helm

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// The release workflow's network-free steps are tests/tools/release.sh; these tests run the
// script itself, against the repository and against copies of it broken one way at a time.

// releaseScript runs tests/tools/release.sh with ROOT=root and returns its standard output
// and standard error together.
func releaseScript(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(harness.RepoRoot(), "tests", "tools", "release.sh")}, args...)...)
	dir := t.TempDir()
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:" + os.Getenv("PATH"), "ROOT=" + root, "HELM=" + harness.Bin(t, "helm"),
		"HOME=" + dir, "HELM_CACHE_HOME=" + dir, "HELM_CONFIG_HOME=" + dir, "HELM_DATA_HOME=" + dir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// chartMeta is what the release reads of Chart.yaml and values.yaml, parsed as YAML (the script
// reads them with sed and awk: the two must agree).
func chartMeta(t *testing.T, root string) (version, appVersion, image string) {
	t.Helper()
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	for file, v := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(root, "charts", "scality-s3-csi-driver", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	return chart.Version, chart.AppVersion, values.Image.Repository
}

// releaseRoot copies what release.sh meta reads into a temporary repository root, with edit
// applied to each file's text (relative path → old → new).
func releaseRoot(t *testing.T, edits map[string][2]string) string {
	t.Helper()
	root := t.TempDir()
	for _, rel := range []string{"CHANGELOG.md", "charts/scality-s3-csi-driver/Chart.yaml", "charts/scality-s3-csi-driver/values.yaml"} {
		b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), rel))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if e, ok := edits[rel]; ok {
			if !strings.Contains(s, e[0]) {
				t.Fatalf("%s has no %q to edit", rel, e[0])
			}
			s = strings.Replace(s, e[0], e[1], 1)
		}
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestReleaseMeta: the tag of the chart's version is accepted and gives the version, the image
// (values.yaml's default, as YAML reads it) and the chart repository next to it; every tag or
// file that disagrees is refused with what to change.
func TestReleaseMeta(t *testing.T) {
	version, appVersion, image := chartMeta(t, harness.RepoRoot())
	if version != appVersion {
		t.Fatalf("Chart.yaml: version %s and appVersion %s differ: one version scheme (CHANGELOG.md) makes them equal", version, appVersion)
	}
	out, err := releaseScript(t, harness.RepoRoot(), "meta", "v"+version)
	if err != nil {
		t.Fatalf("release.sh meta v%s: %v\n%s", version, err, out)
	}
	want := "version=" + version + "\nimage=" + image + "\ncharts=oci://" + image[:strings.LastIndex(image, "/")] + "/charts\n"
	if out != want {
		t.Errorf("release.sh meta v%s printed\n%s\nwant\n%s", version, out, want)
	}

	chart, values, changelog := "charts/scality-s3-csi-driver/Chart.yaml", "charts/scality-s3-csi-driver/values.yaml", "CHANGELOG.md"
	for _, c := range []struct {
		name  string
		tag   string
		edits map[string][2]string
		want  string
	}{
		{"no v", version, nil, "a release tag is v followed by the version"},
		{"not semver", "v" + version + ".1", nil, "is not a semantic version"},
		{"leading zero", "v0" + version, nil, "is not a semantic version"},
		{"other version", "v99.0.0", nil, "Chart.yaml has version " + version + "; set version and appVersion to 99.0.0"},
		{"appVersion behind", "v" + version, map[string][2]string{chart: {"appVersion: \"" + version + "\"", "appVersion: \"0.0.9\""}},
			"has appVersion 0.0.9; set it to " + version},
		{"no changelog section", "v" + version, map[string][2]string{changelog: {"## [" + version + "]", "## [" + version + "-draft]"}},
			"CHANGELOG.md has no section \"## [" + version + "]\""},
		{"image without owner", "v" + version, map[string][2]string{values: {"repository: " + image, "repository: s3-csi-driver"}},
			"expected <registry>/<owner>/<name>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := releaseScript(t, releaseRoot(t, c.edits), "meta", c.tag)
			if err == nil {
				t.Fatalf("release.sh meta %s accepted: %s", c.tag, out)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("release.sh meta %s: %q, want it to say %q", c.tag, out, c.want)
			}
		})
	}
}

// TestReleaseChart: the chart packaged as the release packages it is at the version, with the
// default image the workflow pushes.
func TestReleaseChart(t *testing.T) {
	version, _, image := chartMeta(t, harness.RepoRoot())
	dir := t.TempDir()
	out, err := releaseScript(t, harness.RepoRoot(), "chart", version, dir)
	if err != nil {
		t.Fatalf("release.sh chart: %v\n%s", err, out)
	}
	pkg := strings.TrimSpace(out)
	if pkg != filepath.Join(dir, "scality-s3-csi-driver-"+version+".tgz") {
		t.Fatalf("release.sh chart printed %q", out)
	}
	shown, err := harness.Helm(t, "show", "values", pkg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown, "repository: "+image+"\n") {
		t.Errorf("the packaged chart's values do not default the image to %s", image)
	}
}

// ociArchive writes a tar holding index.json with the given text.
func ociArchive(t *testing.T, index string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": index} {
		if index == "" && name == "index.json" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReleaseIndexDigest: the digest the workflow pushes, signs and checks is the archive's one
// image index; an archive of another shape is refused rather than published under a digest
// nobody tested.
func TestReleaseIndexDigest(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	desc := func(media string) string {
		return `{"mediaType":"` + media + `","digest":"` + d + `","size":1234,"annotations":{"org.opencontainers.image.ref.name":"0.1.0"}}`
	}
	const index, manifest = "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json"
	good := `{"schemaVersion":2,"mediaType":"` + index + `","manifests":[` + desc(index) + `]}`
	out, err := releaseScript(t, harness.RepoRoot(), "index-digest", ociArchive(t, good))
	if err != nil || strings.TrimSpace(out) != d {
		t.Fatalf("index-digest of a multi-platform archive: %q, %v; want %s", out, err, d)
	}
	for name, c := range map[string]struct{ index, want string }{
		"single platform": {`{"schemaVersion":2,"mediaType":"` + index + `","manifests":[` + desc(manifest) + `]}`, "not an OCI image index"},
		"two manifests":   {`{"schemaVersion":2,"manifests":[` + desc(index) + `,` + desc(index) + `]}`, "has 2 manifests"},
		"no digest":       {`{"schemaVersion":2,"manifests":[{"mediaType":"` + index + `","digest":"md5:00"}]}`, "names no sha256 digest"},
		"no index.json":   {"", "no index.json"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := releaseScript(t, harness.RepoRoot(), "index-digest", ociArchive(t, c.index))
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("index-digest: %q, %v; want a refusal saying %q", out, err, c.want)
			}
		})
	}
}

// TestReleaseBumpCheck: once a version is tagged, a change under charts/ without a new version
// is refused; with the new version it passes.
func TestReleaseBumpCheck(t *testing.T) {
	root := releaseRoot(t, nil)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", root, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	version, _, _ := chartMeta(t, root)
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "release")
	if out, err := releaseScript(t, root, "bump-check"); err != nil || !strings.Contains(out, "unreleased") {
		t.Fatalf("bump-check before any tag: %q, %v", out, err)
	}
	git("tag", "v"+version)
	if out, err := releaseScript(t, root, "bump-check"); err != nil || !strings.Contains(out, "as v"+version+" released it") {
		t.Fatalf("bump-check at the tag: %q, %v", out, err)
	}
	valuesPath := filepath.Join(root, "charts", "scality-s3-csi-driver", "values.yaml")
	b, err := os.ReadFile(valuesPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valuesPath, append(b, []byte("# a change\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := releaseScript(t, root, "bump-check")
	if err == nil || !strings.Contains(out, "charts/ changed since v"+version) {
		t.Fatalf("bump-check after an unversioned chart change: %q, %v", out, err)
	}
	chartPath := filepath.Join(root, "charts", "scality-s3-csi-driver", "Chart.yaml")
	b, err = os.ReadFile(chartPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chartPath, []byte(strings.Replace(string(b), "version: "+version, "version: 99.0.0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := releaseScript(t, root, "bump-check"); err != nil || !strings.Contains(out, "no tag v99.0.0") {
		t.Fatalf("bump-check with a new version: %q, %v", out, err)
	}
}

// TestReleaseWorkflow: the workflow builds the image once, takes its version and destinations
// from release.sh (so values.yaml's default image is where it pushes), pushes the tested
// archive with its digests kept, and checks the digest the registry serves.
func TestReleaseWorkflow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses string `json:"uses"`
				Run  string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	builds, runs := 0, ""
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			if strings.HasPrefix(s.Uses, "docker/build-push-action@") {
				builds++
			}
			runs += s.Run + "\n"
		}
	}
	if builds != 1 {
		t.Errorf("the workflow builds the image %d times: it must build once and publish what it tested", builds)
	}
	for _, want := range []string{"release.sh meta \"$GITHUB_REF_NAME\"", "release.sh index-digest /tmp/image.tar", "release.sh index-digest image.tar",
		"skopeo copy --all --preserve-digests oci-archive:image.tar", "skopeo inspect --raw", "release.sh chart \"$VERSION\"", `cosign sign --yes "${IMAGE}@${DIGEST}"`} {
		if !strings.Contains(runs, want) {
			t.Errorf("the workflow's scripts do not run %q", want)
		}
	}
	if strings.Contains(string(b), "repository_owner") {
		t.Errorf("the workflow names a destination by github.repository_owner: it pushes where values.yaml's image.repository says (release.sh meta)")
	}
}

// TestReleaseDocs: docs/install.md writes the release's version as the scheme says (X.Y.Z for
// the image tag and the chart; the v only in the git tag) and names the destinations release.sh
// meta prints.
func TestReleaseDocs(t *testing.T) {
	version, _, image := chartMeta(t, harness.RepoRoot())
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	charts := "oci://" + image[:strings.LastIndex(image, "/")] + "/charts"
	for _, want := range []string{"tag: " + version, image + ":" + version, charts + "/scality-s3-csi-driver --version " + version} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/install.md does not say %q", want)
		}
	}
	if n, tags := strings.Count(doc, "v"+version), strings.Count(doc, "refs/tags/v"+version); n != tags {
		t.Errorf("docs/install.md writes v%s %d times outside the git tag (refs/tags/v%s): the image tag and the chart version are %s", version, n-tags, version, version)
	}
}
