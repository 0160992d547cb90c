package s3

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/credentials"
)

// tlsS3 is an HTTPS server answering every DeleteBucket with 204 and recording requests.
type tlsS3 struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func startTLSS3(t *testing.T) *tlsS3 {
	s := &tlsS3{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Clone(context.Background()))
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *tlsS3) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

var testCreds = credentials.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret"}

func TestStoreCABundle(t *testing.T) {
	srv := startTLSS3(t)
	// Ambient AWS and proxy settings must change nothing: the store reads no environment.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, srv.caPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", caFile)
	t.Setenv("AWS_ENDPOINT_URL", "https://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_S3", "https://127.0.0.1:1")
	t.Setenv("AWS_REGION", "ap-south-7")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	t.Setenv("https_proxy", "http://127.0.0.1:1")

	t.Run("trusted with the bundle", func(t *testing.T) {
		store, err := NewStore(Config{EndpointURL: srv.URL, Region: "us-east-1", CABundle: srv.caPEM()})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Client(testCreds, "").DeleteBucket(context.Background(), "bkt"); err != nil {
			t.Fatalf("DeleteBucket over TLS with the CA bundle: %v", err)
		}
		if err := store.Client(testCreds, "eu-west-9").DeleteBucket(context.Background(), "bkt"); err != nil {
			t.Fatal(err)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if len(srv.reqs) != 2 {
			t.Fatalf("server saw %d requests, want 2", len(srv.reqs))
		}
		for i, region := range []string{"us-east-1", "eu-west-9"} {
			r := srv.reqs[i]
			if r.URL.Path != "/bkt" {
				t.Errorf("path %q: want path-style /bkt", r.URL.Path)
			}
			if auth := r.Header.Get("Authorization"); !strings.Contains(auth, "Credential=AKIDTEST/") || !strings.Contains(auth, "/"+region+"/s3/") {
				t.Errorf("Authorization %q: want key AKIDTEST and region %s", auth, region)
			}
		}
	})
	t.Run("untrusted without it", func(t *testing.T) {
		store, err := NewStore(Config{EndpointURL: srv.URL, Region: "us-east-1"})
		if err != nil {
			t.Fatal(err)
		}
		err = store.Client(testCreds, "").DeleteBucket(context.Background(), "bkt")
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("DeleteBucket without the CA = %v; want ErrUnavailable about the certificate", err)
		}
	})
}

func TestNewStoreErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no region", Config{EndpointURL: "https://s3.example.com"}},
		{"not a URL", Config{EndpointURL: "s3.example.com", Region: "us-east-1"}},
		{"bad scheme", Config{EndpointURL: "ftp://s3.example.com", Region: "us-east-1"}},
		{"bundle without certificates", Config{Region: "us-east-1", CABundle: []byte("not a certificate")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewStore(tc.cfg); err == nil {
				t.Fatal("NewStore accepted an invalid configuration")
			}
		})
	}
}
