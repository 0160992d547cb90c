package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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

func TestS3ServerOptions(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem")

	t.Run("IAM and versioning", func(t *testing.T) {
		s := StartS3With(t, S3Options{IAM: true, Versioning: true})
		s.CreateUser(t, "otheraccess", "othersecret123", "userplus")
		ctx, cancel := opContext()
		defer cancel()
		other := s.ClientAs(t, "otheraccess", "othersecret123")
		if _, err := other.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("other-bucket")}); err != nil {
			t.Fatalf("second account CreateBucket: %v", err)
		}
		if _, err := other.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("other-bucket")}); err == nil || !strings.Contains(err.Error(), "BucketAlreadyOwnedByYou") {
			t.Fatalf("second CreateBucket by the owner = %v, want BucketAlreadyOwnedByYou", err)
		}
		if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("other-bucket")}); err == nil || !strings.Contains(err.Error(), "BucketAlreadyExists") {
			t.Fatalf("root CreateBucket of the other account's bucket = %v, want BucketAlreadyExists", err)
		}
		s.CreateBucket(t, "root-bucket")
		if d := cmp.Diff([]string{"other-bucket", "root-bucket"}, s.ListBuckets(t)); d != "" {
			t.Errorf("ListBuckets (-want +got):\n%s", d)
		}
		if !s.BucketExists(t, "root-bucket") || s.BucketExists(t, "missing-bucket") {
			t.Error("BucketExists is wrong")
		}
		if len(s.BucketTags(t, "root-bucket")) != 0 {
			t.Error("a new bucket has tags")
		}
		s.PutBucketTags(t, "root-bucket", map[string]string{"a": "b"})
		if d := cmp.Diff(map[string]string{"a": "b"}, s.BucketTags(t, "root-bucket")); d != "" {
			t.Errorf("BucketTags (-want +got):\n%s", d)
		}
		s.EnableVersioning(t, "root-bucket")
		s.PutObjects(t, "root-bucket", "obj", 3)
		s.PutObject(t, "root-bucket", "obj-00000", []byte("v2"))
		s.DeleteObject(t, "root-bucket", "obj-00001")
		if n := s.VersionCount(t, "root-bucket"); n != 5 {
			t.Errorf("VersionCount = %d, want 3 objects + 1 version + 1 delete marker", n)
		}
	})
	t.Run("TLS", func(t *testing.T) {
		s := StartS3With(t, S3Options{TLS: true})
		if !strings.HasPrefix(s.Endpoint, "https://") || s.CABundle == "" {
			t.Fatalf("TLS server: endpoint %s, CA bundle %q", s.Endpoint, s.CABundle)
		}
		s.CreateBucket(t, "tls-bucket")
		if d := cmp.Diff([]string{"tls-bucket"}, s.ListBuckets(t)); d != "" {
			t.Errorf("ListBuckets (-want +got):\n%s", d)
		}
	})
}
