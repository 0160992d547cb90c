package s3

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	ownerA = Owner{VolumeName: "pvc-a", VolumeID: "v1:delete:pvc-a"}
	ownerB = Owner{VolumeName: "pvc-b", VolumeID: "v1:delete:pvc-b"}
)

func TestCreateBucket(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares the fake; the bucket under test is "bkt".
		setup      func(f *fakeAPI)
		want       CreateResult
		wantErr    error
		wantTags   map[string]string // nil: bucket must not exist afterwards
		wantOps    map[string]int    // checked when not nil
		created200 bool
	}{
		{
			name:     "new bucket",
			setup:    func(*fakeAPI) {},
			want:     Created,
			wantTags: map[string]string{TagVolumeName: "pvc-a", TagVolumeID: "v1:delete:pvc-a"},
		},
		{
			name:     "retry finds its own bucket",
			setup:    func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{tags: tagsOf(ownerA)} },
			want:     Existing,
			wantTags: tagsOf(ownerA),
			wantOps:  map[string]int{"CreateBucket": 1, "GetBucketTagging": 1},
		},
		{
			name:       "retry answered 200 (AWS us-east-1) finds its own bucket",
			setup:      func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{tags: tagsOf(ownerA)} },
			created200: true,
			want:       Existing,
			wantTags:   tagsOf(ownerA),
		},
		{
			name:     "bucket of another volume",
			setup:    func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{tags: tagsOf(ownerB)} },
			wantErr:  ErrBucketTaken,
			wantTags: tagsOf(ownerB),
		},
		{
			name: "same volume name, other volume id (other parameters)",
			setup: func(f *fakeAPI) {
				f.buckets["bkt"] = &fakeBucket{tags: tagsOf(Owner{VolumeName: "pvc-a", VolumeID: "v1:retain:pvc-a"})}
			},
			wantErr:  ErrBucketTaken,
			wantTags: tagsOf(Owner{VolumeName: "pvc-a", VolumeID: "v1:retain:pvc-a"}),
		},
		{
			name:     "foreign tags are not replaced",
			setup:    func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{tags: map[string]string{"team": "x"}} },
			wantErr:  ErrBucketTaken,
			wantTags: map[string]string{"team": "x"},
		},
		{
			name: "untagged bucket with objects is not adopted",
			setup: func(f *fakeAPI) {
				f.buckets["bkt"] = &fakeBucket{}
				f.put("bkt", "data", 1)
			},
			wantErr:  ErrBucketTaken,
			wantTags: map[string]string{},
			wantOps:  map[string]int{"CreateBucket": 1, "GetBucketTagging": 1, "ListObjectsV2": 1},
		},
		{
			name: "untagged bucket with objects answered 200 is not adopted",
			setup: func(f *fakeAPI) {
				f.buckets["bkt"] = &fakeBucket{}
				f.put("bkt", "data", 1)
			},
			created200: true,
			wantErr:    ErrBucketTaken,
			wantTags:   map[string]string{},
		},
		{
			name:     "empty untagged bucket (interrupted create) is adopted",
			setup:    func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{} },
			want:     Adopted,
			wantTags: tagsOf(ownerA),
		},
		{
			name:    "owned by another account",
			setup:   func(f *fakeAPI) { f.buckets["bkt"] = &fakeBucket{foreign: true} },
			wantErr: ErrBucketTaken,
			wantOps: map[string]int{"CreateBucket": 1},
		},
		{
			name: "tagging denied: the new bucket is removed again",
			setup: func(f *fakeAPI) {
				f.fail = func(op, _ string) error {
					if op == "PutBucketTagging" {
						return apiErr("AccessDenied")
					}
					return nil
				}
			},
			wantErr: ErrAccessDenied,
			wantOps: map[string]int{"CreateBucket": 1, "GetBucketTagging": 2, "ListObjectsV2": 2, "PutBucketTagging": 1, "DeleteBucket": 1},
		},
		{
			name: "tagging denied on an existing bucket: nothing is removed",
			setup: func(f *fakeAPI) {
				f.buckets["bkt"] = &fakeBucket{}
				f.fail = func(op, _ string) error {
					if op == "PutBucketTagging" {
						return apiErr("AccessDenied")
					}
					return nil
				}
			},
			wantErr:  ErrAccessDenied,
			wantTags: map[string]string{},
		},
		{
			name: "create denied",
			setup: func(f *fakeAPI) {
				f.fail = func(op, _ string) error { return apiErr("InvalidAccessKeyId") }
			},
			wantErr: ErrAccessDenied,
		},
		{
			name: "throttled",
			setup: func(f *fakeAPI) {
				f.fail = func(op, _ string) error { return apiErr("SlowDown") }
			},
			wantErr: ErrUnavailable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.created200 = tc.created200
			tc.setup(f)
			got, err := (&Client{api: f}).CreateBucket(context.Background(), "bkt", ownerA)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("CreateBucket = %q, %v; want error %v", got, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("result = %q, want %q", got, tc.want)
			}
			f.fail = nil
			b, exists := f.buckets["bkt"]
			switch {
			case tc.wantTags == nil && exists && !b.foreign:
				t.Errorf("bucket exists afterwards with tags %v", b.tags)
			case tc.wantTags != nil && !exists:
				t.Error("bucket does not exist afterwards")
			case tc.wantTags != nil:
				if d := cmp.Diff(tc.wantTags, b.tags, cmp.Comparer(func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); d != "" {
					t.Errorf("tags (-want +got):\n%s", d)
				}
			}
			if tc.wantOps != nil {
				if d := cmp.Diff(tc.wantOps, f.callCounts()); d != "" {
					t.Errorf("S3 calls (-want +got):\n%s", d)
				}
			}
		})
	}
}

func tagsOf(o Owner) map[string]string {
	return map[string]string{TagVolumeName: o.VolumeName, TagVolumeID: o.VolumeID}
}

func TestBucketOwner(t *testing.T) {
	f := newFake()
	f.buckets["mine"] = &fakeBucket{tags: tagsOf(ownerA)}
	f.buckets["plain"] = &fakeBucket{}
	c := &Client{api: f}
	ctx := context.Background()
	if got, err := c.BucketOwner(ctx, "mine"); err != nil || got != ownerA {
		t.Errorf("BucketOwner(mine) = %+v, %v", got, err)
	}
	if got, err := c.BucketOwner(ctx, "plain"); err != nil || got != (Owner{}) {
		t.Errorf("BucketOwner(plain) = %+v, %v", got, err)
	}
	if _, err := c.BucketOwner(ctx, "missing"); !errors.Is(err, ErrNoSuchBucket) {
		t.Errorf("BucketOwner(missing) = %v, want ErrNoSuchBucket", err)
	}
}

func TestDeleteBucket(t *testing.T) {
	f := newFake()
	f.buckets["empty"] = &fakeBucket{}
	f.buckets["full"] = &fakeBucket{}
	f.put("full", "k", 2)
	c := &Client{api: f}
	ctx := context.Background()
	if err := c.DeleteBucket(ctx, "empty"); err != nil {
		t.Errorf("DeleteBucket(empty) = %v", err)
	}
	if err := c.DeleteBucket(ctx, "empty"); err != nil {
		t.Errorf("DeleteBucket of a deleted bucket = %v, want success", err)
	}
	if err := c.DeleteBucket(ctx, "full"); !errors.Is(err, ErrBucketNotEmpty) {
		t.Errorf("DeleteBucket(full) = %v, want ErrBucketNotEmpty", err)
	}
	if d := cmp.Diff([]string{"full"}, f.bucketNames()); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
}
