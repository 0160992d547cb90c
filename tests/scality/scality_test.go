package scality

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReleaseFacts: what differs between the releases, as SOURCES.md lists it.
func TestReleaseFacts(t *testing.T) {
	type facts struct{ pod, socketFile, forcePathStyle, controller, s3Values, tls, fsGroup, files bool }
	want := map[Release]facts{
		R100: {socketFile: true, files: true},
		R110: {socketFile: true, forcePathStyle: true, files: true},
		R111: {forcePathStyle: true, files: true},
		R120: {forcePathStyle: true, controller: true, s3Values: true, files: true},
		R200: {pod: true, forcePathStyle: true, controller: true, s3Values: true},
		R211: {pod: true, forcePathStyle: true, controller: true, s3Values: true, fsGroup: true, files: true},
		R220: {pod: true, forcePathStyle: true, controller: true, s3Values: true, tls: true, fsGroup: true, files: true},
	}
	for _, r := range Releases {
		got := facts{r.PodMode(), r.SocketFileMounted(), r.ForcePathStyle(), r.Controller(), r.GlobalS3Values(), r.TLS(), r.MountpointPodFSGroup(),
			!r.PodMode() || r.DriverCredentialFilesReadable()}
		if got != want[r] {
			t.Errorf("%s: %+v, want %+v", r, got, want[r])
		}
	}
	if R220.DriverVersion() != "2.1.1" || R211.DriverVersion() != "2.1.1" || R100.DriverVersion() != "1.0.0" {
		t.Error("driver versions: 2.2.0's Makefile says 2.1.1")
	}
}

// TestSecretKeysAccepted: 2.0.0 takes an access key of at most 16 alphanumerics and a secret of
// at most 40 without "-"; 2.1.1 loosened both.
func TestSecretKeysAccepted(t *testing.T) {
	for _, c := range []struct {
		r           Release
		key, secret string
		ok          bool
	}{
		{R200, "AKIAEXAMPLE12345", "abc/def+ghi=", true},
		{R200, "AKIAEXAMPLE123456789", "secret", false}, // a 20-character AWS-style key
		{R200, "key", "with-dash", false},
		{R200, "", "secret", false},
		{R211, "AKIAEXAMPLE123456789", "with-dash/and+more=", true},
		{R220, " key ", " secret ", true}, // trimmed
		{R211, "key!", "secret", false},
	} {
		if got := c.r.SecretKeysAccepted(c.key, c.secret); got != c.ok {
			t.Errorf("%s %q/%q: %v, want %v", c.r, c.key, c.secret, got, c.ok)
		}
	}
}

// TestChart: the chart is assembled as the release workflow packages it: version and
// appVersion the tag, that release's values, the CRD in crds/ from 2.0.0 only.
func TestChart(t *testing.T) {
	for _, r := range Releases {
		dir, err := Chart(t.TempDir(), r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Name, Version, AppVersion string
		}
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Name != ChartName || meta.Version != string(r) || meta.AppVersion != string(r) {
			t.Errorf("%s: Chart.yaml %+v", r, meta)
		}
		var values struct {
			Image struct{ Tag string }
		}
		b, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &values); err != nil || values.Image.Tag != string(r) {
			t.Errorf("%s: values image.tag %q (%v)", r, values.Image.Tag, err)
		}
		_, err = os.Stat(filepath.Join(dir, "crds", "mountpoints3podattachments.yaml"))
		if (err == nil) != r.PodMode() {
			t.Errorf("%s: CRD in crds/: %v", r, err)
		}
		if !strings.Contains(string(b), "@"+string(r)+":") {
			t.Errorf("%s: values.yaml does not name its source tag", r)
		}
	}
}

// TestMergeLeavesItsArguments: Merge copies, as Helm's merge of values files does.
func TestMergeLeavesItsArguments(t *testing.T) {
	a := map[string]any{"node": map[string]any{"x": 1}}
	b := map[string]any{"node": map[string]any{"y": 2}, "z": 3}
	m := Merge(a, b)
	if len(a["node"].(map[string]any)) != 1 || len(m["node"].(map[string]any)) != 2 || m["z"] != 3 {
		t.Errorf("merge %v of %v and %v", m, a, b)
	}
}
