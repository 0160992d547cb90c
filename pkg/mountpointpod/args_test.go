package mountpointpod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckArgs(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		errSS string // "" = accepted
	}{
		{nil, ""},
		{[]string{"--allow-delete", "--uid=1000", "--foreground", "--cache=/x", "--log-directory=/y"}, ""},
		{[]string{"--prefix=a=b"}, ""},
		{[]string{"--"}, "would end mount-s3's options"},
		{[]string{"-f"}, "not a long option"},
		{[]string{"--allow-delete", "bkt2"}, "not a long option"},
		{[]string{"--="}, "not a long option"},
		{[]string{"--foreground=false"}, "takes no value"},
		{[]string{"--help"}, "exit without mounting"},
		{[]string{"--version=1"}, "exit without mounting"},
	} {
		err := checkArgs(tc.args)
		if tc.errSS == "" && err != nil || tc.errSS != "" && (err == nil || !strings.Contains(err.Error(), tc.errSS)) {
			t.Errorf("checkArgs(%q) = %v, want %q", tc.args, err, tc.errSS)
		}
	}
}

func TestMountS3Args(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        []string
		bound     uint64
		want      []string // "<cache>" stands for the created directory
		wantCache bool
	}{
		{"nothing", nil, 0, []string{"--foreground"}, false},
		{"foreground once", []string{"--allow-delete", "--foreground"}, 0, []string{"--foreground", "--allow-delete"}, false},
		{"log directory dropped", []string{"--log-directory=/var/log/x", "--debug"}, 0, []string{"--foreground", "--debug"}, false},
		{"cache replaced", []string{"--cache=/host/cache", "--max-cache-size=10"}, 0, []string{"--foreground", "--cache=<cache>", "--max-cache-size=10"}, true},
		{"bare cache (the node plugin's form) gets one", []string{"--cache", "--max-cache-size=10"}, 0, []string{"--foreground", "--cache=<cache>", "--max-cache-size=10"}, true},
		{"cache-xz untouched", []string{"--cache-xz=bucket--x-s3"}, 0, []string{"--foreground", "--cache-xz=bucket--x-s3"}, false},
		{"bounded cache gets the bound", []string{"--cache"}, 900, []string{"--foreground", "--cache=<cache>", "--max-cache-size=900"}, true},
		{"a size above the bound is lowered", []string{"--cache", "--max-cache-size=5000"}, 900, []string{"--foreground", "--cache=<cache>", "--max-cache-size=900"}, true},
		{"a size within the bound is kept", []string{"--max-cache-size=100", "--cache"}, 900, []string{"--foreground", "--max-cache-size=100", "--cache=<cache>"}, true},
		{"no cache, no size", []string{"--allow-delete"}, 900, []string{"--foreground", "--allow-delete"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir()) // the pod's own /tmp
			got, cache, err := mountS3Args(tc.in, tc.bound)
			if err != nil {
				t.Fatal(err)
			}
			if cache != "" {
				defer os.RemoveAll(cache)
				if fi, err := os.Stat(cache); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("cache directory %s: %v %v", cache, fi.Mode(), err)
				}
				if filepath.Dir(cache) != filepath.Clean(os.TempDir()) {
					t.Errorf("cache directory %s is not in %s", cache, os.TempDir())
				}
			}
			if (cache != "") != tc.wantCache {
				t.Fatalf("cache = %q, want one: %v", cache, tc.wantCache)
			}
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = strings.ReplaceAll(w, "<cache>", cache)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTail(t *testing.T) {
	tl := newTail(16)
	_, _ = tl.Write([]byte("short\n"))
	if got := tl.String(); got != "short\n" {
		t.Fatalf("tail = %q", got)
	}
	_, _ = tl.Write([]byte("a partial line\nlast line\n"))
	if got := tl.String(); got != "[earlier output dropped]\nlast line\n" {
		t.Fatalf("tail = %q", got)
	}
	big := newTail(8)
	_, _ = big.Write([]byte(strings.Repeat("x", 100) + "\nend\n"))
	if got := big.String(); got != "[earlier output dropped]\nend\n" || len(big.buf) != 8 {
		t.Fatalf("tail = %q (%d bytes kept)", got, len(big.buf))
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{CommDir: "/comm", MountS3Path: "/bin/mount-s3"}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{CommDir: "comm", MountS3Path: "mount-s3"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "comm directory") || !strings.Contains(err.Error(), "mount-s3 path") {
		t.Fatalf("Validate = %v", err)
	}
}
