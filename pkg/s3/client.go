package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Config says how to reach the S3 store.
type Config struct {
	// EndpointURL is the store's http(s) URL; empty means AWS S3 (resolved from the region).
	EndpointURL string
	// Region signs requests unless a provisioner secret names another one.
	Region string
	// CABundle holds extra PEM CA certificates trusted for the endpoint, on top of the system
	// ones (a RING behind a private CA). Nil trusts the system CAs only.
	CABundle []byte
	// Proxy is the proxy requests go through (proxyenv.Parse checked it); zero: none.
	Proxy proxyenv.Config
}

// Retry policy of every client: a few quick attempts, so a CSI call fails (and the sidecar
// retries it with its own backoff) well before the sidecar's timeout.
const (
	maxAttempts = 3
	maxBackoff  = 2 * time.Second
)

// Store builds clients for one S3 endpoint. All clients share one HTTP transport (connection
// pool, TLS configuration); a Store is safe for concurrent use.
type Store struct {
	cfg  Config
	http aws.HTTPClient
}

// NewStore validates cfg and prepares the shared transport. Nothing is read from the
// environment: no AWS_* variable (AWS_CA_BUNDLE, AWS_ENDPOINT_URL, AWS_PROFILE, ...) and no
// proxy variable affects the clients; cfg.Proxy alone does.
func NewStore(cfg Config) (*Store, error) {
	if cfg.Region == "" {
		return nil, errors.New("s3: a region is required")
	}
	if cfg.EndpointURL != "" {
		u, err := url.Parse(cfg.EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("s3: endpoint %q is not an http(s) URL", cfg.EndpointURL)
		}
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("s3: the CA bundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	client := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.Proxy = cfg.Proxy.Func()
		tr.TLSClientConfig = tlsConfig
	})
	return &Store{cfg: cfg, http: client}, nil
}

// Client returns a client signing with creds in region ("" means the Store's region). It is
// cheap: clients share the Store's transport.
func (s *Store) Client(creds credentials.Credentials, region string) *Client {
	if region == "" {
		region = s.cfg.Region
	}
	opts := awss3.Options{
		Region:       region,
		UsePathStyle: true,
		Credentials:  awscreds.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		HTTPClient:   s.http,
		AppID:        version.DriverName + "-" + version.Version,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = maxAttempts
			o.MaxBackoff = maxBackoff
			o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(noRetryOnCertificate)}, o.Retryables...)
		}),
		// S3-compatible stores do not all understand the SDK's default flexible checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if s.cfg.EndpointURL != "" {
		opts.BaseEndpoint = aws.String(s.cfg.EndpointURL)
	}
	return &Client{api: awss3.New(opts)}
}

// noRetryOnCertificate stops retries of requests that failed certificate verification: an
// untrusted or mismatching certificate does not fix itself between attempts.
func noRetryOnCertificate(err error) aws.Ternary {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// bucketAPI is the part of the S3 API this package calls.
type bucketAPI interface {
	CreateBucket(context.Context, *awss3.CreateBucketInput, ...func(*awss3.Options)) (*awss3.CreateBucketOutput, error)
	DeleteBucket(context.Context, *awss3.DeleteBucketInput, ...func(*awss3.Options)) (*awss3.DeleteBucketOutput, error)
	GetBucketTagging(context.Context, *awss3.GetBucketTaggingInput, ...func(*awss3.Options)) (*awss3.GetBucketTaggingOutput, error)
	PutBucketTagging(context.Context, *awss3.PutBucketTaggingInput, ...func(*awss3.Options)) (*awss3.PutBucketTaggingOutput, error)
	ListObjectsV2(context.Context, *awss3.ListObjectsV2Input, ...func(*awss3.Options)) (*awss3.ListObjectsV2Output, error)
	ListObjectVersions(context.Context, *awss3.ListObjectVersionsInput, ...func(*awss3.Options)) (*awss3.ListObjectVersionsOutput, error)
	DeleteObjects(context.Context, *awss3.DeleteObjectsInput, ...func(*awss3.Options)) (*awss3.DeleteObjectsOutput, error)
	ListMultipartUploads(context.Context, *awss3.ListMultipartUploadsInput, ...func(*awss3.Options)) (*awss3.ListMultipartUploadsOutput, error)
	AbortMultipartUpload(context.Context, *awss3.AbortMultipartUploadInput, ...func(*awss3.Options)) (*awss3.AbortMultipartUploadOutput, error)
}

var _ bucketAPI = (*awss3.Client)(nil)

// Client performs the bucket operations of dynamic provisioning with one set of credentials.
type Client struct {
	api bucketAPI
}
