package sysuser

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"s3csi-mount", "_s3", "a", "mount_s3-2"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "root", "S3", "-x", "1abc", "a b", "a/b", "a:b", strings.Repeat("a", 32), "ü"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) accepted", bad)
		}
	}
}

func TestIDsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids")
	if err := WriteIDs(p, IDs{UID: 991, GID: 992}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseIDs(b); err != nil || got != (IDs{UID: 991, GID: 992}) {
		t.Fatalf("ParseIDs(%q) = %+v, %v", b, got, err)
	}
	for name, content := range map[string]string{
		"root":      "0 0\n",
		"one field": "991\n",
		"negative":  "-1 5\n",
		"words":     "a b\n",
		"three":     "1 2 3\n",
	} {
		if ids, err := ParseIDs([]byte(content)); err == nil {
			t.Errorf("%s: ParseIDs accepted %q as %+v", name, content, ids)
		}
	}
}
