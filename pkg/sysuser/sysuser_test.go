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
	dir := t.TempDir()
	p := filepath.Join(dir, "ids")
	if err := WriteIDs(p, IDs{UID: 991, GID: 992}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadIDs(p)
	if err != nil || got != (IDs{UID: 991, GID: 992}) {
		t.Fatalf("ReadIDs = %+v, %v", got, err)
	}
	for name, content := range map[string]string{
		"root":      "0 0\n",
		"one field": "991\n",
		"negative":  "-1 5\n",
		"words":     "a b\n",
		"too long":  strings.Repeat("9", maxIDsFile+1),
	} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if ids, err := ReadIDs(bad); err == nil {
			t.Errorf("%s: ReadIDs accepted %q as %+v", name, content, ids)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIDs(link); err == nil {
		t.Error("ReadIDs followed a symbolic link")
	}
	if _, err := ReadIDs(dir); err == nil {
		t.Error("ReadIDs read a directory")
	}
}
