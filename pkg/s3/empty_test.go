package s3

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"
)

func TestEmptyBucket(t *testing.T) {
	future := func() time.Time { return time.Now().Add(time.Hour) }
	past := func() time.Time { return time.Now().Add(-time.Second) }
	uploads := func(n int) []types.MultipartUpload {
		var out []types.MultipartUpload
		for i := range n {
			out = append(out, types.MultipartUpload{Key: aws.String(fmt.Sprintf("up-%d", i)), UploadId: aws.String(fmt.Sprintf("id-%d", i))})
		}
		return out
	}
	tests := []struct {
		name    string
		objects int
		uploads int
		setup   func(f *fakeAPI)
		stopAt  func() time.Time
		// calls is how many calls it takes; each but the last returns ErrNotEmptied.
		calls   int
		want    []EmptyResult // per call
		wantErr error         // of the last call
		left    int           // object versions left
	}{
		{name: "already empty", stopAt: future, calls: 1, want: []EmptyResult{{}}},
		{name: "one page", objects: 10, stopAt: future, calls: 1, want: []EmptyResult{{Objects: 10}}},
		{name: "several pages in one call", objects: 2500, stopAt: future, calls: 1, want: []EmptyResult{{Objects: 2500}}},
		{
			// No time at all: every call still deletes one page, then stops; the next call
			// resumes where the previous one stopped.
			name: "budget exhausted, resumed", objects: 2500, stopAt: past, calls: 4,
			want: []EmptyResult{{Objects: 1000}, {Objects: 1000}, {Objects: 500}, {}},
		},
		{
			name: "uploads after objects", objects: 3, uploads: 2, stopAt: future, calls: 1,
			want: []EmptyResult{{Objects: 3, Uploads: 2}},
		},
		{
			name: "uploads need their own call when time is out", objects: 3, uploads: 2, stopAt: past, calls: 3,
			want: []EmptyResult{{Objects: 3}, {Uploads: 2}, {}},
		},
		{
			name: "no ListObjectVersions: ListObjectsV2", objects: 4, stopAt: future, calls: 1,
			setup: notImplemented("ListObjectVersions"),
			want:  []EmptyResult{{Objects: 4}},
		},
		{
			name: "no multipart upload listing", objects: 1, stopAt: future, calls: 1,
			setup: notImplemented("ListMultipartUploads"),
			want:  []EmptyResult{{Objects: 1}},
		},
		{
			name: "a key that cannot be deleted fails the call", objects: 5, stopAt: future, calls: 1,
			setup:   func(f *fakeAPI) { f.deleteErrors = map[string]string{"obj-00002": "AccessDenied"} },
			want:    []EmptyResult{{Objects: 4}},
			wantErr: ErrAccessDenied,
			left:    1,
		},
		{
			name: "throttled listing", objects: 5, stopAt: future, calls: 1,
			setup: func(f *fakeAPI) {
				f.fail = func(op, _ string) error {
					if op == "ListObjectVersions" {
						return apiErr("SlowDown")
					}
					return nil
				}
			},
			want: []EmptyResult{{}}, wantErr: ErrUnavailable, left: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.buckets["bkt"] = &fakeBucket{uploads: uploads(tc.uploads)}
			f.put("bkt", "obj", tc.objects)
			if tc.setup != nil {
				tc.setup(f)
			}
			c := &Client{api: f}
			var got []EmptyResult
			var err error
			for i := range tc.calls {
				var res EmptyResult
				res, err = c.EmptyBucket(context.Background(), "bkt", tc.stopAt())
				got = append(got, res)
				if i < tc.calls-1 && !errors.Is(err, ErrNotEmptied) {
					t.Fatalf("call %d: err = %v, want ErrNotEmptied", i+1, err)
				}
			}
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("last call: err = %v, want %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("results (-want +got):\n%s", d)
			}
			if n := f.objectCount("bkt"); n != tc.left {
				t.Errorf("%d object versions left, want %d", n, tc.left)
			}
			if tc.wantErr == nil && len(f.buckets["bkt"].uploads) != 0 {
				t.Errorf("%d uploads left", len(f.buckets["bkt"].uploads))
			}
		})
	}
}

func TestEmptyBucketMissing(t *testing.T) {
	res, err := (&Client{api: newFake()}).EmptyBucket(context.Background(), "gone", time.Now().Add(time.Hour))
	if err != nil || res != (EmptyResult{}) {
		t.Fatalf("EmptyBucket of a missing bucket = %+v, %v; want nothing to do", res, err)
	}
}

func TestEmptyBucketContext(t *testing.T) {
	f := newFake()
	f.buckets["bkt"] = &fakeBucket{}
	f.put("bkt", "obj", 3)
	f.fail = func(string, string) error { return fmt.Errorf("send: %w", context.DeadlineExceeded) }
	_, err := (&Client{api: f}).EmptyBucket(context.Background(), "bkt", time.Now().Add(time.Hour))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want the context error", err)
	}
}

// notImplemented makes the fake answer NotImplemented to every call of op, as stores without
// that S3 feature do.
func notImplemented(op string) func(*fakeAPI) {
	return func(f *fakeAPI) {
		f.fail = func(o, _ string) error {
			if o == op {
				return apiErr("NotImplemented")
			}
			return nil
		}
	}
}
