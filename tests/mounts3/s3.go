package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// objInfo is the metadata the file system needs about one object.
type objInfo struct {
	key   string
	size  int64
	mtime time.Time
}

// listing is one page of a ListObjectsV2 answer: full keys of objects and full common
// prefixes (each ending in the delimiter), plus the continuation token ("" on the last page).
type listing struct {
	objects  []objInfo
	prefixes []string
	next     string
}

// errNotFound is returned by store.head when the object does not exist.
var errNotFound = errors.New("object not found")

// store is the narrow object API the file system uses. Keys are full S3 keys (the --prefix
// is already part of them). Implementations must be safe for concurrent use.
type store interface {
	list(ctx context.Context, prefix, delimiter string, maxKeys int32, token string) (listing, error)
	head(ctx context.Context, key string) (objInfo, error)
	// readInto fills dst with the bytes of key at off and returns how many it read (fewer at
	// the end of the object, 0 at or past it).
	readInto(ctx context.Context, key string, off int64, dst []byte) (int, error)
	put(ctx context.Context, key string, body []byte) error
	del(ctx context.Context, key string) error
}

// s3Store implements store with aws-sdk-go-v2 against one bucket.
type s3Store struct {
	c      *s3.Client
	bucket string
	o      *Options
}

// newS3Client builds the SDK client as mount-s3 builds its CRT client, in the same order
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-client/src/s3_crt_client.rs,
// S3CrtClientInner::new): the CA bundle is checked first, then the credentials, the endpoint and
// the part sizes. Errors are the causes under "Failed to create S3 client". Only what the CRT
// client reads is used: credentials through the SDK's default chain (E1), --region else
// AWS_REGION else us-east-1 (E3), --endpoint-url else AWS_ENDPOINT_URL (E2), AWS_MAX_ATTEMPTS
// (E4, X3), the CA bundle in place of the system's trust store (E5); the variables only the Go
// SDK would read (AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_RETRY_MODE, SSL_CERT_FILE, ...)
// are left out. It returns the client and the region.
func newS3Client(ctx context.Context, o *Options, parts partSizes) (*s3.Client, string, error) {
	roots, bundle, err := trustStore(o)
	if err != nil {
		return nil, "", err
	}
	attempts := maxAttempts()
	region := "us-east-1"
	if r, ok := os.LookupEnv("AWS_REGION"); ok {
		region = r
	}
	if o.Region != "" {
		region = o.Region
	}
	endpoint := o.EndpointURL
	if e, ok := os.LookupEnv("AWS_ENDPOINT_URL"); ok && endpoint == "" {
		endpoint = e
	}
	// The SDK reads more of the environment than the CRT client: keep it to the credentials.
	for _, k := range []string{"AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
		"AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_CA_BUNDLE", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_USE_FIPS_ENDPOINT"} {
		os.Unsetenv(k)
	}
	os.Setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true") // no endpoint_url from profiles either
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = connectTimeout }).
		WithTransportOptions(func(tr *http.Transport) { tr.TLSClientConfig = &tls.Config{RootCAs: roots} })
	// The SDK's own warnings (e.g. IMDS fallbacks) would go to stderr unasked; drop them.
	lo := []func(*config.LoadOptions) error{
		config.WithLogger(logging.Nop{}), config.WithRegion(region), config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts, so.Backoff, so.RateLimiter = attempts, fullJitter{}, ratelimit.None
				so.Retryables = append([]retry.IsErrorRetryable{noRetryForBadNames}, so.Retryables...)
			})
		}),
	}
	if bundle != nil {
		lo = append(lo, config.WithCustomCABundle(bytes.NewReader(bundle)))
	}
	if o.Profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(o.Profile))
	}
	if o.NoSignRequest {
		lo = append(lo, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, "", chainError{"invalid AWS credentials", err.Error()}
	}
	for _, s := range []uint64{parts.read, parts.write} {
		if s < 5*mib || s > 5<<30 {
			return nil, "", chainError{"invalid configuration: part size must be at between 5MiB and 5GiB"}
		}
	}
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if endpoint != "" {
			so.BaseEndpoint = aws.String(endpoint)
		}
		so.RetryMaxAttempts = 0
		so.UsePathStyle = o.ForcePathStyle
		so.UseAccelerate = o.TransferAcceleration
		if o.DualStack {
			so.EndpointOptions.UseDualStackEndpoint = aws.DualStackEndpointStateEnabled
		}
		if o.UploadChecksums == "off" {
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		}
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return c, region, nil
}

// connectTimeout is the CRT's connect timeout (aws-c-s3's default, from an indexed aws-c-s3
// copy, not the pinned submodule).
const connectTimeout = 3 * time.Second

// maxAttempts is the number of attempts of each request: AWS_MAX_ATTEMPTS when it parses as a
// usize (0 counts as 1), else mount-s3's 10 (s3/config.rs, create_client; s3_crt_client.rs,
// S3CrtClientInner::new).
func maxAttempts() int {
	if v, ok := os.LookupEnv("AWS_MAX_ATTEMPTS"); ok {
		if n, err := parseRustUint(v); err == nil {
			return int(max(1, min(n, 1<<20)))
		}
	}
	return 10
}

// fullJitter is the CRT's standard retry backoff as mount-s3 configures it: full jitter with a
// 500 ms scale, capped at the CRT's 20 s (the cap is from the code comment in s3/config.rs,
// create_client, not read in the CRT).
type fullJitter struct{}

// BackoffDelay returns a random delay in [0, min(20 s, 500 ms x 2^(attempt-1))).
func (fullJitter) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	ceiling := 20 * time.Second
	if attempt < 16 {
		ceiling = min(ceiling, 500*time.Millisecond<<max(attempt-1, 0))
	}
	return time.Duration(rand.Int64N(int64(ceiling))), nil
}

// caFiles are the system trust stores looked for when no CA bundle is given, in Go's order
// for Linux (aws-c-io's own list was not read); the environment (SSL_CERT_FILE, SSL_CERT_DIR)
// is not consulted, as the CRT does not consult it.
var caFiles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem"}

// trustStore returns the roots to trust: only the CA bundle's when one is given (the bundle
// replaces the system's, cli.rs CliArgs.ca_bundle), else the system's. A bundle that cannot be
// stat'ed or is not a regular file fails as TlsConfig::validate does; one without a
// certificate fails as building the TLS context does (the CRT's own text was not read).
func trustStore(o *Options) (*x509.CertPool, []byte, error) {
	pool := x509.NewCertPool()
	if !o.HasCABundle {
		for _, f := range caFiles {
			if b, err := os.ReadFile(f); err == nil && pool.AppendCertsFromPEM(b) {
				break
			}
		}
		return pool, nil, nil
	}
	p := o.CABundle
	st, err := os.Stat(p)
	if err != nil {
		return nil, nil, chainError{"invalid TLS configuration", fmt.Sprintf("CA bundle '%s' cannot be read: %s", p, rustIOErr(err)), rustIOErr(err)}
	}
	if !st.Mode().IsRegular() {
		return nil, nil, chainError{"invalid TLS configuration", fmt.Sprintf("CA bundle '%s' is not a regular file", p)}
	}
	b, err := os.ReadFile(p)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		return nil, nil, chainError{"failed to build TLS context", fmt.Sprintf("no certificate could be loaded from '%s'", p)}
	}
	return pool, b, nil
}

// rustIOErr renders err as Rust's io::Error does for an OS error ("No such file or directory
// (os error 2)").
func rustIOErr(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return err.Error()
	}
	t := en.Error()
	if t != "" {
		t = strings.ToUpper(t[:1]) + t[1:]
	}
	return fmt.Sprintf("%s (os error %d)", t, int(en))
}

// checkBucket performs mount-s3's start-up probe (awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3-fs/src/s3/config.rs, validate_client_for_bucket): one ListObjectsV2 with
// delimiter "" and max-keys 0 under the prefix, with the header
// x-amz-optional-object-attributes: RestoreStatus. A response whose IsTruncated disagrees
// with its NextContinuationToken fails as the CRT client's parser does (list_objects.rs,
// parse_result_from_xml). The error is mount-s3's "Caused by" chain and never contains
// credentials.
func (s *s3Store) checkBucket(ctx context.Context, region string) error {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.o.Prefix), Delimiter: aws.String(""),
		MaxKeys: aws.Int32(0), OptionalObjectAttributes: []types.OptionalObjectAttributes{types.OptionalObjectAttributesRestoreStatus}}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.ListObjectsV2(ctx, in)
	var cause []string
	switch {
	case err != nil:
		cause = describeProbeErr(err)
	case aws.ToBool(out.IsTruncated) != (out.NextContinuationToken != nil):
		cause = []string{"Client error", "Internal S3 client error", "XML response was not valid: problem = IsTruncated doesn't match NextContinuationToken"}
	default:
		return nil
	}
	return append(chainError{"Failed to create S3 client", fmt.Sprintf("initial ListObjectsV2 failed for bucket %s in region %s", s.bucket, region)}, cause...)
}

// describeProbeErr renders a failed probe as the CRT client classifies it (s3_crt_client.rs,
// try_parse_generic_error; list_objects.rs, parse_list_objects_error): NoSuchBucket is a
// service error, a 403 (or an access error code) is "Forbidden: <S3's message>", any other
// answer an unknown response error, and no answer at all a CRT error (whose own text was not
// read: the stand-in gives Go's).
func describeProbeErr(err error) []string {
	var re *awshttp.ResponseError
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket":
		return []string{"Service error", "The bucket does not exist"}
	case errors.As(err, &re) && errors.As(err, &ae) && (re.HTTPStatusCode() == 403 || slices.Contains([]string{"AccessDenied", "InvalidToken", "ExpiredToken", "SignatureDoesNotMatch"}, ae.ErrorCode())):
		msg := ae.ErrorMessage()
		if msg == "" {
			msg = ae.ErrorCode()
		}
		return []string{"Client error", "Forbidden: " + msg}
	case errors.As(err, &re) && re.HTTPStatusCode() != 0:
		return []string{"Client error", fmt.Sprintf("Unknown response error: MetaRequestResult { response_status: %d, .. }", re.HTTPStatusCode())}
	}
	return []string{"Client error", "Unknown CRT error", crtError(err)}
}

// crtError renders a transport error as the CRT's error of the same kind, "CRT error <code>:
// aws-c-io: <NAME>, <text>" (@58817cab2:mountpoint-s3-crt/src/common/error.rs (Display);
// the codes and texts of awslabs/aws-c-io@8bda5cf0, the pinned submodule: include/aws/io/io.h
// (aws_io_errors), source/io.c, source/posix/host_resolver.c; the "lib: NAME, text" form of
// aws-c-common's AWS_DEFINE_ERROR_INFO at its newest commit, the pinned one not being in the
// mirror). Which code the CRT reports for a connection the server closes was not read: the
// stand-in says AWS_IO_SOCKET_CLOSED. Anything else keeps Go's text.
func crtError(err error) string {
	var dns *net.DNSError
	var x509Unknown x509.UnknownAuthorityError
	var x509Host x509.HostnameError
	var x509Invalid x509.CertificateInvalidError
	var tlsRecord tls.RecordHeaderError
	var tlsVerify *tls.CertificateVerificationError
	var netErr net.Error
	code, name, text := 0, "", ""
	switch {
	case errors.As(err, &x509Unknown), errors.As(err, &x509Host), errors.As(err, &x509Invalid),
		errors.As(err, &tlsRecord), errors.As(err, &tlsVerify), strings.Contains(err.Error(), "tls: "):
		code, name, text = 1029, "AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE", "TLS (SSL) negotiation failed"
	case errors.As(err, &dns) && dns.IsNotFound:
		code, name, text = 1059, "AWS_IO_DNS_INVALID_NAME", "Host name was invalid for dns resolution."
	case errors.As(err, &dns):
		code, name, text = 1058, "AWS_IO_DNS_QUERY_FAILED", "A nonrecoverable failure when query to dns occurred."
	case errors.Is(err, syscall.ECONNREFUSED):
		code, name, text = 1047, "AWS_IO_SOCKET_CONNECTION_REFUSED", "socket connection refused."
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		code, name, text = 1049, "AWS_IO_SOCKET_NO_ROUTE_TO_HOST", "socket connect failure, no route to host."
	case errors.As(err, &netErr) && netErr.Timeout():
		code, name, text = 1048, "AWS_IO_SOCKET_TIMEOUT", "socket operation timed out."
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		code, name, text = 1051, "AWS_IO_SOCKET_CLOSED", "socket is closed."
	default:
		return err.Error()
	}
	return fmt.Sprintf("CRT error %d: aws-c-io: %s, %s", code, name, text)
}

// noRetryForBadNames refuses to retry what aws-c-s3 fails at once while acquiring a
// connection: a host name the resolver does not know (awslabs/aws-c-s3@448ec5e49, the pinned
// submodule: source/s3_client.c, s_s3_client_on_acquire_http_connection); everything else at
// that stage, TLS failures included, is retried.
var noRetryForBadNames = retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
})

// describeErr renders an SDK error without request details: "Code: message" for service
// errors, the transport error otherwise.
func describeErr(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if m := ae.ErrorMessage(); m != "" {
			return ae.ErrorCode() + ": " + m
		}
		return ae.ErrorCode()
	}
	return err.Error()
}

func (s *s3Store) list(ctx context.Context, prefix, delimiter string, maxKeys int32, token string) (listing, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix)}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	if maxKeys > 0 {
		in.MaxKeys = aws.Int32(maxKeys)
	}
	if token != "" {
		in.ContinuationToken = aws.String(token)
	}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.ListObjectsV2(ctx, in)
	if err != nil {
		return listing{}, err
	}
	var l listing
	for _, o := range out.Contents {
		l.objects = append(l.objects, objInfo{key: aws.ToString(o.Key), size: aws.ToInt64(o.Size), mtime: aws.ToTime(o.LastModified)})
	}
	for _, p := range out.CommonPrefixes {
		l.prefixes = append(l.prefixes, aws.ToString(p.Prefix))
	}
	if aws.ToBool(out.IsTruncated) {
		l.next = aws.ToString(out.NextContinuationToken)
	}
	return l, nil
}

func (s *s3Store) head(ctx context.Context, key string) (objInfo, error) {
	in := &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.HeadObject(ctx, in)
	if err != nil {
		var nf *types.NotFound
		var nsk *types.NoSuchKey
		if errors.As(err, &nf) || errors.As(err, &nsk) {
			return objInfo{}, errNotFound
		}
		return objInfo{}, err
	}
	return objInfo{key: key, size: aws.ToInt64(out.ContentLength), mtime: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) readInto(ctx context.Context, key string, off int64, dst []byte) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key), Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(dst))-1))}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	out, err := s.c.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
			return 0, nil // read at or past the end of a shrunken object
		}
		return 0, err
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, dst)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil // the object ends before dst does
	}
	return n, err
}

func (s *s3Store) put(ctx context.Context, key string, body []byte) error {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(key), Body: bytes.NewReader(body)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	if s.o.StorageClass != "" {
		in.StorageClass = types.StorageClass(s.o.StorageClass)
	}
	if s.o.SSE != "" {
		in.ServerSideEncryption = types.ServerSideEncryption(s.o.SSE)
	}
	if s.o.SSEKMSKeyID != "" {
		in.SSEKMSKeyId = aws.String(s.o.SSEKMSKeyID)
	}
	if s.o.UploadChecksums != "off" {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32c
	}
	_, err := s.c.PutObject(ctx, in)
	return err
}

func (s *s3Store) del(ctx context.Context, key string) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(key)}
	if s.o.ExpectedBucketOwner != "" {
		in.ExpectedBucketOwner = aws.String(s.o.ExpectedBucketOwner)
	}
	if s.o.RequesterPays {
		in.RequestPayer = types.RequestPayerRequester
	}
	_, err := s.c.DeleteObject(ctx, in)
	return err
}

// chainError is an error and its causes, printed as anyhow prints one from main: the message,
// then "Caused by:" and the causes, numbered when there are several.
type chainError []string

func (c chainError) Error() string {
	switch len(c) {
	case 0:
		return ""
	case 1:
		return c[0]
	case 2:
		return c[0] + "\n\nCaused by:\n    " + c[1]
	}
	s := c[0] + "\n\nCaused by:"
	for i, m := range c[1:] {
		s += fmt.Sprintf("\n    %d: %s", i, m)
	}
	return s
}

// wrap puts msg in front of err's chain, as anyhow's context does.
func wrap(msg string, err error) chainError {
	var c chainError
	if errors.As(err, &c) {
		return append(chainError{msg}, c...)
	}
	return chainError{msg, err.Error()}
}
