//go:build linux

package mountoptions

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestValidate(t *testing.T) {
	good := func() Options {
		return Options{BucketName: "bkt", Args: []string{"--allow-delete"}, Env: []string{"AWS_REGION=us-east-1", "EMPTY="}}
	}
	for _, tc := range []struct {
		name   string
		modify func(*Options)
		errSS  string // "" = valid
	}{
		{"valid", func(*Options) {}, ""},
		{"no args no env", func(o *Options) { o.Args, o.Env = nil, nil }, ""},
		{"legacy bucket name", func(o *Options) { o.BucketName = "My_Legacy.Bucket-1" }, ""},
		{"bucket at the length limit", func(o *Options) { o.BucketName = strings.Repeat("a", MaxBucketNameLen) }, ""},
		{"empty bucket", func(o *Options) { o.BucketName = "" }, "must be 3 to 255 bytes"},
		{"short bucket", func(o *Options) { o.BucketName = "ab" }, "must be 3 to 255 bytes"},
		{"long bucket", func(o *Options) { o.BucketName = strings.Repeat("a", MaxBucketNameLen+1) }, "must be 3 to 255 bytes"},
		{"bucket like an option", func(o *Options) { o.BucketName = "--help" }, "must start and end with a letter or digit"},
		{"bucket like a path", func(o *Options) { o.BucketName = "a/../b" }, "may only hold"},
		{"bucket with NUL", func(o *Options) { o.BucketName = "ab\x00c" }, "may only hold"},
		{"too many args", func(o *Options) { o.Args = make([]string, MaxArgs+1) }, "at most 256"},
		{"empty arg", func(o *Options) { o.Args = []string{""} }, "argument 0: empty"},
		{"long arg", func(o *Options) { o.Args = []string{"--" + strings.Repeat("x", MaxArgLen)} }, "argument 0: 4098 bytes"},
		{"NUL in arg", func(o *Options) { o.Args = []string{"--a", "--b\x00"} }, "argument 1: contains a NUL"},
		{"bidi override in arg", func(o *Options) { o.Args = []string{"--a\u202e"} }, "argument 0: contains invisible Unicode"},
		{"newline in env", func(o *Options) { o.Env = []string{"A=x\ny"} }, "contains control characters"},
		{"invalid UTF-8 arg", func(o *Options) { o.Args = []string{"--\xff"} }, "not valid UTF-8"},
		{"too many env", func(o *Options) { o.Env = make([]string, MaxEnv+1) }, "at most 128"},
		{"env without =", func(o *Options) { o.Env = []string{"AWS_REGION"} }, "not KEY=VALUE"},
		{"env empty key", func(o *Options) { o.Env = []string{"=x"} }, "not a valid variable name"},
		{"env key with digit first", func(o *Options) { o.Env = []string{"1A=x"} }, "not a valid variable name"},
		{"env key with dash", func(o *Options) { o.Env = []string{"A-B=x"} }, "not a valid variable name"},
		{"env long key", func(o *Options) { o.Env = []string{strings.Repeat("K", MaxEnvKeyLen+1) + "=x"} }, "not a valid variable name"},
		{"env NUL", func(o *Options) { o.Env = []string{"A=x\x00y"} }, "contains a NUL"},
		{"env duplicate", func(o *Options) { o.Env = []string{"A=1", "B=2", "A=3"} }, "A is given more than once"},
		{"env too long", func(o *Options) { o.Env = []string{"A=" + strings.Repeat("v", MaxEnvLen)} }, "4098 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.modify(&o)
			err := o.Validate()
			if tc.errSS == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errSS) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tc.errSS)
			}
		})
	}
}

func TestEnvKeys(t *testing.T) {
	o := Options{Env: []string{"A=secret", "B=", "C=x=y"}}
	if diff := cmp.Diff([]string{"A", "B", "C"}, o.EnvKeys()); diff != "" {
		t.Fatalf("EnvKeys (-want +got):\n%s", diff)
	}
}

func TestParse(t *testing.T) {
	one := unix.UnixRights(7)
	for _, tc := range []struct {
		name    string
		data    string
		oob     [][]byte
		want    Options
		wantFDs []int
		err     error
		errSS   string
	}{
		{"minimal", `{"bucketName":"bkt"}`, [][]byte{one}, Options{BucketName: "bkt"}, []int{7}, nil, ""},
		{"full", `{"bucketName":"bkt","args":["--a","--b=1"],"env":["K=V"]}`, [][]byte{one},
			Options{BucketName: "bkt", Args: []string{"--a", "--b=1"}, Env: []string{"K=V"}}, []int{7}, nil, ""},
		{"nulls", `{"bucketName":"bkt","args":null,"env":null}`, [][]byte{one}, Options{BucketName: "bkt"}, []int{7}, nil, ""},
		{"whitespace", " \n{ \"bucketName\" : \"bkt\" }\n ", [][]byte{one}, Options{BucketName: "bkt"}, []int{7}, nil, ""},
		{"fd in a later buffer", `{"bucketName":"bkt"}`, [][]byte{nil, one}, Options{BucketName: "bkt"}, []int{7}, nil, ""},
		{"no fd", `{"bucketName":"bkt"}`, nil, Options{}, nil, ErrNoFD, ""},
		{"empty rights", `{"bucketName":"bkt"}`, [][]byte{unix.UnixRights()}, Options{}, nil, ErrNoFD, ""},
		{"two fds in one message", `{"bucketName":"bkt"}`, [][]byte{unix.UnixRights(7, 8)}, Options{}, []int{7, 8}, ErrTooManyFDs, "got 2"},
		{"two fds in two buffers", `{"bucketName":"bkt"}`, [][]byte{one, unix.UnixRights(9)}, Options{}, []int{7, 9}, ErrTooManyFDs, ""},
		{"credentials message", `{"bucketName":"bkt"}`, [][]byte{append(unix.UnixCredentials(&unix.Ucred{}), one...)}, Options{}, []int{7}, ErrMalformed, "unexpected control message"},
		{"truncated control message", `{"bucketName":"bkt"}`, [][]byte{one[:unix.CmsgLen(0)]}, Options{}, nil, ErrMalformed, "bad control message"},
		{"empty", ``, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "not a JSON object"},
		{"array", `["bkt"]`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "not a JSON object"},
		{"not JSON", `bucketName=bkt`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, ""},
		{"unterminated", `{"bucketName":"bkt"`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, ""},
		{"unknown field", `{"bucketName":"bkt","fd":3}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, `unknown field "fd"`},
		{"field name case", `{"BucketName":"bkt"}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, `unknown field "BucketName"`},
		{"duplicate field", `{"bucketName":"bkt","bucketName":"other"}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "more than once"},
		{"wrong type", `{"bucketName":"bkt","args":"--a"}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "field args"},
		{"number in args", `{"bucketName":"bkt","args":[1]}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "field args"},
		{"trailing data", `{"bucketName":"bkt"}{}`, [][]byte{one}, Options{}, []int{7}, ErrMalformed, "after the JSON object"},
		{"missing bucket", `{"args":[]}`, [][]byte{one}, Options{}, []int{7}, ErrInvalid, "bucket name"},
		{"NUL escape in arg", `{"bucketName":"bkt","args":["--a\u0000"]}`, [][]byte{one}, Options{}, []int{7}, ErrInvalid, "NUL"},
		{"too large", `{"bucketName":"bkt","args":["--` + strings.Repeat("x", MaxMessageSize) + `"]}`, [][]byte{one}, Options{}, []int{7}, ErrTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oob := make([][]byte, len(tc.oob))
			copy(oob, tc.oob)
			got, fds, err := parse([]byte(tc.data), oob...)
			if diff := cmp.Diff(tc.wantFDs, fds); diff != "" {
				t.Errorf("descriptors (-want +got):\n%s", diff)
			}
			if tc.err == nil {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Fatalf("options (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errSS) {
				t.Fatalf("parse error = %v, want %v containing %q", err, tc.err, tc.errSS)
			}
		})
	}
}
