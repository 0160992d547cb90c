package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestS3Server(t *testing.T) {
	// Ambient AWS settings must not leak into the server or the client.
	t.Setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem")
	t.Setenv("AWS_PROFILE", "nonexistent-profile")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")

	s := StartS3(t)
	if s.Region != "us-east-1" || s.AccessKey == "" || s.SecretKey == "" {
		t.Fatalf("server fields: %+v", s)
	}
	s.CreateBucket(t, "harness-bucket")
	if fi, err := os.Stat(filepath.Join(s.DataDir, "harness-bucket")); err != nil || !fi.IsDir() {
		t.Fatalf("bucket directory under DataDir: %v", err)
	}
	body := bytes.Repeat([]byte{0, 1, 2, 255}, 1<<16)
	s.PutObject(t, "harness-bucket", "a/b.bin", body)
	s.PutObject(t, "harness-bucket", "c.txt", []byte("c"))
	if got := s.GetObject(t, "harness-bucket", "a/b.bin"); !bytes.Equal(got, body) {
		t.Fatalf("GetObject returned %d bytes, want %d identical", len(got), len(body))
	}
	if !s.ObjectExists(t, "harness-bucket", "c.txt") || s.ObjectExists(t, "harness-bucket", "missing") {
		t.Fatal("ObjectExists is wrong")
	}
	if d := cmp.Diff([]string{"a/b.bin", "c.txt"}, s.ListKeys(t, "harness-bucket")); d != "" {
		t.Fatalf("ListKeys (-want +got):\n%s", d)
	}

	// Two servers side by side get distinct ports and data.
	s2 := StartS3(t)
	if s2.Endpoint == s.Endpoint || s2.DataDir == s.DataDir {
		t.Fatalf("second server shares endpoint or data dir: %s %s", s2.Endpoint, s2.DataDir)
	}
	s2.CreateBucket(t, "harness-bucket") // same name: the servers do not share data
	if keys := s2.ListKeys(t, "harness-bucket"); len(keys) != 0 {
		t.Fatalf("fresh server's bucket has keys: %v", keys)
	}
}
