package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Server is a running versitygw (posix backend) on a loopback port, owned by one test.
//
// Every bucket is a sub-directory of DataDir. The root credentials are AccessKey/SecretKey; the
// server accepts any region name, Region is the one the helpers sign with.
type S3Server struct {
	Endpoint  string // e.g. "http://127.0.0.1:41234"
	Region    string // "us-east-1"
	AccessKey string
	SecretKey string
	DataDir   string

	logPath string
}

const (
	s3StartTimeout = 30 * time.Second
	s3StopTimeout  = 10 * time.Second
	s3OpTimeout    = 30 * time.Second
)

// StartS3 starts versitygw (bin/versitygw, see Bin) on a free loopback port with a fresh data
// directory under t.TempDir(), and waits (bounded) until its /health endpoint answers. On a
// timeout or early exit it fails the test, quoting versitygw's output. The server is stopped
// (SIGTERM, then SIGKILL after a grace period) and waited for in t.Cleanup.
//
// versitygw runs with an explicit minimal environment (PATH, HOME and the root keys), so
// ambient AWS_* or CA variables of the test process never reach it.
func StartS3(t TB) *S3Server {
	t.Helper()
	bin := Bin(t, "versitygw")
	base := t.TempDir()
	s := &S3Server{
		Region:    "us-east-1",
		AccessKey: "testaccess",
		SecretKey: "testsecret123",
		DataDir:   filepath.Join(base, "data"),
		logPath:   filepath.Join(base, "versitygw.log"),
	}
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		t.Fatalf("create versitygw data dir: %v", err)
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatalf("create versitygw log: %v", err)
	}
	defer logFile.Close() // the child holds its own copy

	// A port picked by listening on :0 can be taken by someone else before versitygw binds
	// it; retry with a new port when versitygw exits early.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		fmt.Fprintf(logFile, "=== attempt %d on %s\n", attempt+1, addr)
		cmd := exec.Command(bin, "--port", addr, "--health", "/health", "posix", s.DataDir)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + base,
			"ROOT_ACCESS_KEY=" + s.AccessKey,
			"ROOT_SECRET_KEY=" + s.SecretKey,
		}
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		if err := cmd.Start(); err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()

		s.Endpoint = "http://" + addr
		if lastErr = waitHealthy(s.Endpoint+"/health", exited); lastErr == nil {
			t.Cleanup(func() { stopProcess(t, cmd.Process, exited, s.logPath) })
			return s
		}
		stopProcess(t, cmd.Process, exited, s.logPath)
		if !errors.Is(lastErr, errExitedEarly) {
			break
		}
	}
	out, _ := os.ReadFile(s.logPath)
	t.Fatalf("versitygw did not become healthy: %v\n--- versitygw output ---\n%s", lastErr, out)
	return nil
}

var errExitedEarly = errors.New("versitygw exited early")

// waitHealthy polls url until it answers 200, the process exits, or s3StartTimeout passes.
func waitHealthy(url string, exited <-chan error) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(s3StartTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("%w: %v", errExitedEarly, err)
		default:
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no healthy answer from %s within %v", url, s3StartTimeout)
}

// stopProcess terminates p (if it is still running) and waits for the Wait goroutine.
func stopProcess(t TB, p *os.Process, exited <-chan error, logPath string) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(s3StopTimeout):
	}
	_ = p.Kill()
	select {
	case <-exited:
	case <-time.After(s3StopTimeout):
		t.Logf("versitygw (pid %d) did not exit after SIGKILL; log at %s", p.Pid, logPath)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Client returns an aws-sdk-go-v2 S3 client for the server: path-style addressing, static
// root credentials, the server's region and endpoint. It is built from explicit options only,
// so no AWS_* variable (AWS_CA_BUNDLE, AWS_PROFILE, ...) of the environment affects it.
func (s *S3Server) Client(t TB) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:   &http.Client{Transport: &http.Transport{Proxy: nil}},
		// versitygw understands the SDK's default flexible checksums, but be conservative.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s3OpTimeout)
}

// CreateBucket creates bucket name, failing the test on error.
func (s *S3Server) CreateBucket(t TB, name string) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("CreateBucket %s: %v", name, err)
	}
}

// PutObject stores body under bucket/key, failing the test on error.
func (s *S3Server) PutObject(t TB, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	_, err := s.Client(t).PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body),
	})
	if err != nil {
		t.Fatalf("PutObject %s/%s: %v", bucket, key, err)
	}
}

// GetObject returns the body of bucket/key; it fails the test if the object is missing or the
// request fails.
func (s *S3Server) GetObject(t TB, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	out, err := s.Client(t).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GetObject %s/%s: read body: %v", bucket, key, err)
	}
	return body
}

// ObjectExists reports whether bucket/key exists (HeadObject). Errors other than "not found"
// fail the test.
func (s *S3Server) ObjectExists(t TB, bucket, key string) bool {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	_, err := s.Client(t).HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err == nil {
		return true
	}
	var nf *types.NotFound
	var nsk *types.NoSuchKey
	if errors.As(err, &nf) || errors.As(err, &nsk) || strings.Contains(err.Error(), "StatusCode: 404") {
		return false
	}
	t.Fatalf("HeadObject %s/%s: %v", bucket, key, err)
	return false
}

// ListKeys returns every key in bucket, sorted (all pages of ListObjectsV2).
func (s *S3Server) ListKeys(t TB, bucket string) []string {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(t), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListObjectsV2 %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	sort.Strings(keys)
	return keys
}
