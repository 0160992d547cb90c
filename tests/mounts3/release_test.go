package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Start-up refusals of mount-s3 1.24.0, run against the binary (so MOUNT_S3 holds them
// against another one). None of these needs an S3 server: each is refused before the first
// request (an endpoint that refuses connections and AWS_MAX_ATTEMPTS=1 make any that is not
// fail fast).

// TestStartupRefusals (rows O3, X5, R2, E5): what mount-s3 refuses on its command line (clap,
// exit 2) and at start-up (exit 1), with its messages.
func TestStartupRefusals(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	notFile := t.TempDir()
	base := []string{"bkt", dir, "--foreground", "--endpoint-url", "http://127.0.0.1:1", "--force-path-style"}
	noCA := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name  string
		extra []string
		env   env
		code  int
		want  string // the whole of stderr when it starts with "Error:", else a substring
	}{
		{"no max-memory-target", []string{"--max-memory-target", "1024"}, nil, 2,
			"error: unexpected argument '--max-memory-target' found"},
		{"memory target below 512", []string{"--memory-target", "511"}, nil, 2,
			"error: invalid value '511' for '--memory-target <MiB>': 511 is not in 512..18446744073709551615"},
		{"read part above the budget of an explicit target", []string{"--memory-target", "512", "--read-part-size", "419430400"}, nil, 1,
			"Error: read part size (400 MiB) exceeds the memory available for data buffers (384 MiB). The memory target is 512 MiB, of which 128 MiB is reserved for Mountpoint overhead. Increase --memory-target or decrease --read-part-size.\n"},
		{"part size above the budget of an explicit target", []string{"--memory-target", "1000", "--part-size", "1048576000"}, nil, 1,
			"Error: read part size (1000 MiB) exceeds the memory available for data buffers (872 MiB). The memory target is 1000 MiB, of which 128 MiB is reserved for Mountpoint overhead. Increase --memory-target or decrease --read-part-size.\n"},
		{"budget with a fraction", []string{"--memory-target", "2000", "--read-part-size", "2097152000"}, nil, 1,
			"Error: read part size (1.95 GiB) exceeds the memory available for data buffers (1.71 GiB). The memory target is 1.95 GiB, of which 250 MiB is reserved for Mountpoint overhead. Increase --memory-target or decrease --read-part-size.\n"},
		{"part size below 5 MiB", []string{"--part-size", "5242879"}, nil, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    invalid configuration: part size must be at between 5MiB and 5GiB\n"},
		{"write part size above 5 GiB", []string{"--write-part-size", "5368709121"}, nil, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    invalid configuration: part size must be at between 5MiB and 5GiB\n"},
		{"read part size below 5 MiB", []string{"--read-part-size", "1048576"}, nil, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    invalid configuration: part size must be at between 5MiB and 5GiB\n"},
		{"CA bundle that does not exist", []string{"--ca-bundle", noCA}, nil, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    0: invalid TLS configuration\n    1: CA bundle '" + noCA + "' cannot be read: No such file or directory (os error 2)\n    2: No such file or directory (os error 2)\n"},
		{"CA bundle from AWS_CA_BUNDLE", nil, env{"AWS_CA_BUNDLE": noCA}, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    0: invalid TLS configuration\n    1: CA bundle '" + noCA + "' cannot be read: No such file or directory (os error 2)\n    2: No such file or directory (os error 2)\n"},
		{"CA bundle flag over AWS_CA_BUNDLE", []string{"--ca-bundle", notFile}, env{"AWS_CA_BUNDLE": noCA}, 1,
			"Error: Failed to create S3 client\n\nCaused by:\n    0: invalid TLS configuration\n    1: CA bundle '" + notFile + "' is not a regular file\n"},
		{"empty AWS_CA_BUNDLE", nil, env{"AWS_CA_BUNDLE": ""}, 2,
			"error: a value is required for '--ca-bundle <PATH>' but none was supplied"},
		{"CA bundle checked before the part sizes", []string{"--ca-bundle", notFile, "--part-size", "1"}, nil, 1,
			"is not a regular file"},
		{"AES256 with a KMS key", []string{"--sse", "AES256", "--sse-kms-key-id", "arn:aws:kms:r:1:key/k"}, nil, 1,
			"Error: --sse-kms-key-id can not be used with --sse AES256\n"},
		{"SSE checked before the memory target", []string{"--sse", "AES256", "--sse-kms-key-id", "arn:aws:kms:r:1:key/k", "--memory-target", "512", "--part-size", "536870912"}, nil, 1,
			"Error: --sse-kms-key-id can not be used with --sse AES256\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "1", "HOME": t.TempDir()}
			for k, v := range tc.env {
				e[k] = v
			}
			code, _, stderr := runStandin(t, e, append(append([]string{}, base...), tc.extra...)...)
			ok := strings.Contains(stderr, tc.want)
			if strings.HasPrefix(tc.want, "Error:") {
				ok = stderr == tc.want
			}
			if code != tc.code || !ok {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// TestProbeRequest (row X1): the start-up probe is one ListObjectsV2 with max-keys=0, an empty
// delimiter and the prefix, asking for RestoreStatus.
func TestProbeRequest(t *testing.T) {
	needFUSE(t)
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>no</Message></Error>`))
	}))
	defer srv.Close()
	dir, _ := mountDir(t)
	code, _, stderr := runStandin(t, env{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "HOME": t.TempDir()},
		"bkt", dir, "--foreground", "--endpoint-url", srv.URL, "--force-path-style", "--prefix", "p/")
	if code != 1 || !strings.Contains(stderr, "The bucket does not exist") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("%d requests, want the one probe", len(got))
	}
	r := got[0]
	q := r.URL.Query()
	if r.Method != http.MethodGet || r.URL.Path != "/bkt" || q.Get("list-type") != "2" || q.Get("max-keys") != "0" ||
		!q.Has("delimiter") || q.Get("delimiter") != "" || q.Get("prefix") != "p/" ||
		r.Header.Get("X-Amz-Optional-Object-Attributes") != "RestoreStatus" {
		t.Errorf("probe %s %s, header x-amz-optional-object-attributes %q; want GET /bkt?list-type=2&delimiter=&max-keys=0&prefix=p/ with RestoreStatus",
			r.Method, r.URL.RequestURI(), r.Header.Get("X-Amz-Optional-Object-Attributes"))
	}
}

// TestProbeAgainstVersitygw (row X1): versitygw answers the probe's max-keys=0 with a listing
// whose IsTruncated agrees with its continuation token, in an empty bucket and in one with
// objects, so the mount goes ahead (TestDaemonMountReadWrite mounts a bucket with objects).
func TestProbeAgainstVersitygw(t *testing.T) {
	f := newFixture(t, "bkt-probe")
	for _, objects := range []int{0, 3} {
		for i := range objects {
			f.s3.PutObject(t, f.bucket, "k"+string(rune('a'+i)), []byte("x"))
		}
		dir, pidFile := mountDir(t)
		pid := daemonMount(t, f.env, dir, pidFile, f.args(dir)...)
		unmountAndWait(t, dir, pid)
	}
}

// TestMountPointRules (rows M3-M5, M9): any stat failure is "does not exist" (a dead FUSE
// mount's ENOTCONN included); a path is compared with mountinfo as given, so a relative one
// is never "already mounted"; a non-empty directory is refused by libfuse 2, after the
// probe; /dev/fd/0 is a file descriptor mount point.
func TestMountPointRules(t *testing.T) {
	f := newFixture(t, "bkt-mprules")
	t.Run("dead FUSE mount", func(t *testing.T) {
		dir, _ := mountDir(t)
		dev := fuseMount(t, dir, false)
		dev.Close() // nobody serves the connection: stat answers ENOTCONN
		code, _, stderr := runStandin(t, f.env, f.args(dir, "--foreground")...)
		want := "Error: Failed to create mount point\n\nCaused by:\n    mount point " + dir + " does not exist\n"
		if code != 1 || !strings.HasSuffix(stderr, want) {
			t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, want)
		}
	})
	t.Run("not accessible", func(t *testing.T) {
		parent := t.TempDir() // 0700: uid 1000 cannot stat inside it
		dir := filepath.Join(parent, "mnt")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := runAs("/", 1000, 1000, standinBin+" bkt "+dir+" --foreground --endpoint-url http://127.0.0.1:1 2>&1")
		if err == nil || !strings.Contains(out, "mount point "+dir+" does not exist") {
			t.Errorf("as uid 1000: %v, output %q; want 'does not exist'", err, out)
		}
	})
	t.Run("relative path over a mount", func(t *testing.T) {
		dir, pidFile := mountDir(t)
		if err := mountTmpfs(t, dir); err != nil {
			t.Fatal(err)
		}
		args := append([]string{f.bucket, "mnt"}, f.args(dir)[2:]...)
		code, stdout, stderr := runStandinIn(t, filepath.Dir(dir), env{"UNSTABLE_MOUNTPOINT_PID_FILE": pidFile}.with(f.env), args...)
		if code != 0 || !strings.Contains(stdout, "is mounted at mnt") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want the relative path mounted over the tmpfs", code, stdout, stderr)
		}
		if n := mountsAt(t, dir); n != 2 {
			t.Errorf("%d mounts at %s, want the tmpfs and mount-s3's", n, dir)
		}
		unmountAndWait(t, dir, readPid(pidFile))
	})
	t.Run("non-empty directory", func(t *testing.T) {
		for _, fg := range []bool{true, false} {
			dir, _ := mountDir(t)
			mustWrite(t, filepath.Join(dir, "left-over"), "x")
			args := f.args(dir)
			if fg {
				args = append(args, "--foreground")
			}
			code, _, stderr := runStandin(t, f.env, args...)
			want := "fuse: mountpoint is not empty\nfuse: if you are sure this is safe, use the 'nonempty' mount option\nError: Failed to create FUSE session\n\nCaused by:\n"
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("foreground %t: exit %d, stderr %q; want 1 and libfuse's refusal %q", fg, code, stderr, want)
			}
			if n := mountsAt(t, dir); n != 0 {
				t.Errorf("%d mounts at %s after the refusal", n, dir)
			}
		}
		// The probe comes first: a missing bucket is reported, not the directory.
		dir, _ := mountDir(t)
		mustWrite(t, filepath.Join(dir, "left-over"), "x")
		code, _, stderr := runStandin(t, f.env, "missing-bucket", dir, "--foreground", "--endpoint-url", f.s3.Endpoint, "--force-path-style")
		if code != 1 || !strings.Contains(stderr, "The bucket does not exist") || strings.Contains(stderr, "not empty") {
			t.Errorf("exit %d, stderr %q; want the probe's error first", code, stderr)
		}
	})
	t.Run("fd 0", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		code, stderr := runWithStdin(t, r, f.env, f.args("/dev/fd/0", "--foreground")...)
		if code != 1 || !strings.Contains(stderr, "expected mount point /dev/fd/0 to be a /dev/fuse device file descriptor but got Pipe(") {
			t.Errorf("exit %d, stderr %q; want /dev/fd/0 taken as a descriptor (a pipe here)", code, stderr)
		}
	})
}
