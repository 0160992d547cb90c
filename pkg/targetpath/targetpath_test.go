package targetpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	kubelet := t.TempDir()
	pods := filepath.Join(kubelet, "pods")
	if err := os.MkdirAll(filepath.Join(pods, "uid1", "volumes", "kubernetes.io~csi", "pv1"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(pods, "evil")); err != nil {
		t.Fatal(err)
	}
	valid := []struct {
		name, target, podUID, pv string
	}{
		{"kubelet layout", pods + "/uid1/volumes/kubernetes.io~csi/pv1/mount", "uid1", "pv1"},
		{"layout with missing parent", pods + "/uid2/volumes/kubernetes.io~csi/pv2/mount", "uid2", "pv2"},
		{"other shape below pods", pods + "/uid1/volumes/kubernetes.io~csi/pv1/target", "", ""},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(kubelet, tc.target)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Path != tc.target || p.PodUID != tc.podUID || p.PVName != tc.pv {
				t.Errorf("got %+v", p)
			}
		})
	}
	invalid := []struct{ name, target, msg string }{
		{"empty", "", "empty"},
		{"relative", "pods/x/mount", "not absolute"},
		{"traversal", pods + "/uid1/../../../etc", "not a clean path"},
		{"dot", pods + "/./uid1/mount", "not a clean path"},
		{"double slash", pods + "//uid1/mount", "not a clean path"},
		{"trailing slash", pods + "/uid1/mount/", "not a clean path"},
		{"outside kubelet", "/etc/passwd", "is not below"},
		{"kubelet root itself", kubelet, "is not below"},
		{"pods dir itself", pods, "is not below"},
		{"sibling prefix", kubelet + "/podsX/uid/mount", "is not below"},
		{"plugins dir", kubelet + "/plugins/x/mount", "is not below"},
		{"newline", pods + "/uid1/mo\nunt", "control characters"},
		{"nul", pods + "/uid1/mo\x00unt", "control characters"},
		{"non utf8", pods + "/uid1/\xff", "UTF-8"},
		{"too long", pods + "/" + strings.Repeat("a", MaxLen), "longer than"},
		{"symlink escape", pods + "/evil/target", "resolves outside"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(kubelet, tc.target)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Parse(%q) err = %v, want ErrInvalid containing %q", tc.target, err, tc.msg)
			}
		})
	}
}

// FuzzParse checks that anything Parse accepts is clean, absolute, strictly below the pods
// directory and free of control characters, and that it never panics.
func FuzzParse(f *testing.F) {
	kubelet := f.TempDir()
	for _, s := range []string{"/pods/a/volumes/kubernetes.io~csi/b/mount", "/pods/../x", "/pods/a/", "/pods//a", "/pods/a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, suffix string) {
		target := kubelet + suffix
		p, err := Parse(kubelet, target)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if filepath.Clean(p.Path) != p.Path || !strings.HasPrefix(p.Path, kubelet+"/pods/") || strings.Contains(p.Path, "/../") {
			t.Fatalf("accepted unsafe path %q", p.Path)
		}
		if strings.ContainsAny(p.Path, "\x00\n\r") {
			t.Fatalf("accepted control characters in %q", p.Path)
		}
		if p.PodUID != "" && (strings.Contains(p.PodUID, "/") || strings.Contains(p.PVName, "/")) {
			t.Fatalf("bad layout parse %+v", p)
		}
	})
}
