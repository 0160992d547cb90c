package harness

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
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
	Endpoint  string // e.g. "http://127.0.0.1:41234" ("https://..." with TLS)
	Region    string // "us-east-1"
	AccessKey string
	SecretKey string
	DataDir   string
	// AdminEndpoint is versitygw's admin API (S3Options.IAM only), used by CreateUser.
	AdminEndpoint string
	// CABundle is the PEM file of the self-signed certificate the server presents
	// (S3Options.TLS only).
	CABundle string

	opts    S3Options
	caPEM   []byte
	logPath string
}

// S3Options select optional versitygw features. The zero value is what StartS3 starts.
type S3Options struct {
	// IAM runs versitygw's internal IAM service, so CreateUser can add accounts besides root.
	IAM bool
	// Versioning lets buckets enable object versioning (PutBucketVersioning).
	Versioning bool
	// TLS serves HTTPS with a fresh self-signed certificate for 127.0.0.1 (see CABundle).
	TLS bool
	// DataDir, when set, is the posix back end's directory, kept as it is (a server started
	// again on the data of an earlier one: the VM rig's reboot); else a fresh one.
	DataDir string
	// Addr, when set, is the loopback address to listen on (one attempt, no other port: the
	// endpoint a mount recorded before a reboot); else a free port.
	Addr string
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
	return StartS3With(t, S3Options{})
}

// StartS3With is StartS3 with optional features (IAM users, versioning, TLS).
func StartS3With(t TB, o S3Options) *S3Server {
	t.Helper()
	bin := Bin(t, "versitygw")
	base := t.TempDir()
	s := &S3Server{
		Region:    "us-east-1",
		AccessKey: "testaccess",
		SecretKey: "testsecret123",
		DataDir:   cmp.Or(o.DataDir, filepath.Join(base, "data")),
		opts:      o,
		logPath:   filepath.Join(base, "versitygw.log"),
	}
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		t.Fatalf("create versitygw data dir: %v", err)
	}
	var extra, backend []string
	if o.IAM {
		iamDir := filepath.Join(base, "iam")
		if err := os.MkdirAll(iamDir, 0o700); err != nil {
			t.Fatalf("create versitygw IAM dir: %v", err)
		}
		extra = append(extra, "--iam-dir", iamDir)
	}
	if o.Versioning {
		verDir := filepath.Join(base, "versions")
		if err := os.MkdirAll(verDir, 0o700); err != nil {
			t.Fatalf("create versitygw versioning dir: %v", err)
		}
		backend = append(backend, "--versioning-dir", verDir)
	}
	scheme := "http"
	if o.TLS {
		scheme = "https"
		certFile, keyFile := filepath.Join(base, "cert.pem"), filepath.Join(base, "key.pem")
		s.caPEM = writeSelfSignedCert(t, certFile, keyFile)
		s.CABundle = certFile
		extra = append(extra, "--cert", certFile, "--key", keyFile)
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
		addr := o.Addr
		if addr == "" {
			port, err := freePort()
			if err != nil {
				t.Fatalf("pick a free port: %v", err)
			}
			addr = fmt.Sprintf("127.0.0.1:%d", port)
		}
		args := append([]string{"--port", addr, "--health", "/health"}, extra...)
		if o.IAM {
			adminPort, err := freePort()
			if err != nil {
				t.Fatalf("pick a free port: %v", err)
			}
			adminAddr := fmt.Sprintf("127.0.0.1:%d", adminPort)
			args = append(args, "--admin-port", adminAddr)
			s.AdminEndpoint = scheme + "://" + adminAddr
		}
		args = append(append(append(args, "posix"), backend...), s.DataDir)
		fmt.Fprintf(logFile, "=== attempt %d on %s\n", attempt+1, addr)
		cmd := exec.Command(bin, args...)
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

		s.Endpoint = scheme + "://" + addr
		if lastErr = waitHealthy(s.httpClient(), s.Endpoint+"/health", exited); lastErr == nil {
			t.Cleanup(func() { stopProcess(t, cmd.Process, exited, s.logPath) })
			return s
		}
		stopProcess(t, cmd.Process, exited, s.logPath)
		if !errors.Is(lastErr, errExitedEarly) || o.Addr != "" {
			break
		}
	}
	out, _ := os.ReadFile(s.logPath)
	t.Fatalf("versitygw did not become healthy: %v\n--- versitygw output ---\n%s", lastErr, out)
	return nil
}

// httpClient is an HTTP client for the server: no proxy, and with TLS trusting exactly the
// server's certificate (never AWS_CA_BUNDLE or other ambient settings).
func (s *S3Server) httpClient() *http.Client {
	tr := &http.Transport{Proxy: nil}
	if s.caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}
}

// writeSelfSignedCert writes a fresh ECDSA certificate for 127.0.0.1 and localhost, valid for a
// day, and its key; it returns the certificate's PEM.
func writeSelfSignedCert(t TB, certFile, keyFile string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "versitygw test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatalf("write certificate: %v", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatalf("write key: %v", err)
	}
	return certPEM
}

// UnrelatedCA writes a CA certificate (PEM) no server of the tests uses and returns its path:
// a bundle that trusts the wrong CA.
func UnrelatedCA(t TB) string {
	t.Helper()
	dir := t.TempDir()
	writeSelfSignedCert(t, filepath.Join(dir, "unrelated-ca.pem"), filepath.Join(dir, "unrelated-ca.key"))
	return filepath.Join(dir, "unrelated-ca.pem")
}

var errExitedEarly = errors.New("versitygw exited early")

// waitHealthy polls url until it answers 200, the process exits, or s3StartTimeout passes.
func waitHealthy(client *http.Client, url string, exited <-chan error) error {
	client.Timeout = time.Second
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

// stopProcess terminates p (if it is still running) and waits for the Wait goroutine. How it
// exited does not matter: it was asked to.
func stopProcess(t TB, p *os.Process, exited <-chan error, logPath string) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var exit *exec.ExitError
		asked := errors.As(err, &exit) && exit.String() == "signal: terminated"
		if err != nil && !asked {
			t.Logf("versitygw stopped: %v; log at %s", err, logPath)
		}
		return
	case <-time.After(s3StopTimeout):
	}
	_ = p.Kill()
	select {
	case err := <-exited:
		t.Logf("versitygw killed (%v)", err)
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
	return s.ClientAs(t, s.AccessKey, s.SecretKey)
}

// ClientAs is Client signing with another account's keys (see CreateUser).
func (s *S3Server) ClientAs(t TB, accessKey, secretKey string) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
		HTTPClient:   s.httpClient(),
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

// CreateUser adds an account to a server started with S3Options.IAM, through versitygw's admin
// API. role is "user" (no bucket creation), "userplus" (creates its own buckets) or "admin".
func (s *S3Server) CreateUser(t TB, accessKey, secretKey, role string) {
	t.Helper()
	if s.AdminEndpoint == "" {
		t.Fatalf("CreateUser needs a server started with S3Options{IAM: true}")
	}
	args := []string{"admin", "--access", s.AccessKey, "--secret", s.SecretKey, "--endpoint-url", s.AdminEndpoint}
	if s.opts.TLS {
		args = append(args, "--allow-insecure")
	}
	cmd := exec.Command(Bin(t, "versitygw"), append(args, "create-user", "--access", accessKey, "--secret", secretKey, "--role", role)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("versitygw admin create-user %s: %v\n%s", accessKey, err, out)
	}
}

// ListBuckets returns the names of every bucket the root account sees, sorted.
func (s *S3Server) ListBuckets(t TB) []string {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	var names []string
	p := s3.NewListBucketsPaginator(s.Client(t), &s3.ListBucketsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListBuckets: %v", err)
		}
		for _, b := range page.Buckets {
			names = append(names, aws.ToString(b.Name))
		}
	}
	sort.Strings(names)
	return names
}

// BucketExists reports whether bucket exists (HeadBucket as root).
func (s *S3Server) BucketExists(t TB, bucket string) bool {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	_, err := s.Client(t).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		return true
	}
	var nf *types.NotFound
	var nsb *types.NoSuchBucket
	if errors.As(err, &nf) || errors.As(err, &nsb) {
		return false
	}
	t.Fatalf("HeadBucket %s: %v", bucket, err)
	return false
}

// BucketTags returns the tags of bucket (empty when it has none).
func (s *S3Server) BucketTags(t TB, bucket string) map[string]string {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	out, err := s.Client(t).GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
	tags := map[string]string{}
	if err != nil {
		if strings.Contains(err.Error(), "NoSuchTagSet") {
			return tags
		}
		t.Fatalf("GetBucketTagging %s: %v", bucket, err)
	}
	for _, tag := range out.TagSet {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	return tags
}

// PutBucketTags replaces the tags of bucket.
func (s *S3Server) PutBucketTags(t TB, bucket string, tags map[string]string) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	var set []types.Tag
	for k, v := range tags {
		set = append(set, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	if _, err := s.Client(t).PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: set}}); err != nil {
		t.Fatalf("PutBucketTagging %s: %v", bucket, err)
	}
}

// EnableVersioning turns on object versioning for bucket (needs S3Options.Versioning).
func (s *S3Server) EnableVersioning(t TB, bucket string) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	_, err := s.Client(t).PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	})
	if err != nil {
		t.Fatalf("PutBucketVersioning %s: %v", bucket, err)
	}
}

// DeleteObject deletes bucket/key (a delete marker in a versioned bucket).
func (s *S3Server) DeleteObject(t TB, bucket, key string) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	if _, err := s.Client(t).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatalf("DeleteObject %s/%s: %v", bucket, key, err)
	}
}

// PutObjects stores n small objects named prefix-00000 ... in bucket, several at a time.
func (s *S3Server) PutObjects(t TB, bucket, prefix string, n int) {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	client := s.Client(t)
	const workers = 16
	keys := make(chan string)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			var first error
			for k := range keys {
				if first != nil {
					continue
				}
				_, first = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(k)})
			}
			errs <- first
		}()
	}
	for i := range n {
		keys <- fmt.Sprintf("%s-%05d", prefix, i)
	}
	close(keys)
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("PutObjects %s: %v", bucket, err)
		}
	}
}

// VersionCount returns how many object versions and delete markers bucket holds.
func (s *S3Server) VersionCount(t TB, bucket string) int {
	t.Helper()
	ctx, cancel := opContext()
	defer cancel()
	n := 0
	p := s3.NewListObjectVersionsPaginator(s.Client(t), &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListObjectVersions %s: %v", bucket, err)
		}
		n += len(page.Versions) + len(page.DeleteMarkers)
	}
	return n
}
