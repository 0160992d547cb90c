package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want func(o *Options)
	}{
		{"positionals only", []string{"bkt", "/mnt"}, func(o *Options) {}},
		{"options before", []string{"--read-only", "--region", "eu-west-1", "bkt", "/mnt"}, func(o *Options) {
			o.ReadOnly, o.Region = true, "eu-west-1"
		}},
		{"options between and after", []string{"bkt", "--uid=1000", "/mnt", "--gid", "2000", "--allow-other"}, func(o *Options) {
			o.UID, o.HasUID, o.GID, o.HasGID, o.AllowOther = 1000, true, 2000, true, true
		}},
		{"modes octal with and without 0", []string{"bkt", "/mnt", "--dir-mode=770", "--file-mode", "0660"}, func(o *Options) {
			o.DirMode, o.HasDirMode, o.FileMode, o.HasFileMode = 0o770, true, 0o660, true
		}},
		{"prefix and endpoint", []string{"--prefix=a/b/", "--endpoint-url", "http://127.0.0.1:9000", "--force-path-style", "bkt", "/mnt"}, func(o *Options) {
			o.Prefix, o.EndpointURL, o.ForcePathStyle = "a/b/", "http://127.0.0.1:9000", true
		}},
		{"bundled short flags", []string{"-fd", "bkt", "/mnt"}, func(o *Options) { o.Foreground, o.Debug = true, true }},
		{"short log dir forms", []string{"-l", "/logs", "bkt", "/mnt"}, func(o *Options) { o.LogDirectory = "/logs" }},
		{"short log dir attached", []string{"-l/logs", "bkt", "/mnt"}, func(o *Options) { o.LogDirectory = "/logs" }},
		{"double dash", []string{"--allow-delete", "--", "bkt", "/mnt"}, func(o *Options) { o.AllowDelete = true }},
		{"fd mount point", []string{"bkt", "/dev/fd/3", "-f"}, func(o *Options) { o.MountPoint, o.Foreground = "/dev/fd/3", true }},
		{"every value option", []string{"bkt", "/mnt",
			"--bucket-type", "directory", "--profile", "p", "--storage-class", "STANDARD_IA",
			"--maximum-throughput-gbps", "5", "--max-threads", "8", "--read-part-size", "1024",
			"--write-part-size=2048", "--expected-bucket-owner", "123456789012", "--cache", "/c",
			"--max-cache-size", "0", "--cache-xz", "xz-bucket--use1-az4--x-s3", "--user-agent-prefix", "ua",
			"--sse", "aws:kms", "--sse-kms-key-id", "arn:aws:kms:us-east-1:1:key/k", "--upload-checksums", "off",
			"--bind", "eth0", "--bind=eth1", "--metadata-ttl", "indefinite", "--negative-metadata-ttl=30"}, func(o *Options) {
			o.BucketType, o.Profile, o.StorageClass = "directory", "p", "STANDARD_IA"
			o.MaxThroughputGbps, o.MaxThreads, o.ReadPartSize, o.WritePartSize = 5, 8, 1024, 2048
			o.ExpectedBucketOwner, o.Cache, o.CacheXZ, o.UserAgentPrefix = "123456789012", "/c", "xz-bucket--use1-az4--x-s3", "ua"
			o.SSE, o.SSEKMSKeyID, o.UploadChecksums = "aws:kms", "arn:aws:kms:us-east-1:1:key/k", "off"
			o.Bind = []string{"eth0", "eth1"}
			o.MetadataTTL = ttl{set: true, indefinite: true}
			o.NegativeMetadataTTL = ttl{set: true, d: 30 * time.Second}
		}},
		{"every flag", []string{"bkt", "/mnt", "--transfer-acceleration", "--dual-stack", "--requester-pays",
			"--no-sign-request", "--allow-overwrite", "--incremental-upload", "--auto-unmount", "--allow-root",
			"--log-metrics", "--debug-crt", "--part-size", "10"}, func(o *Options) {
			o.TransferAcceleration, o.DualStack, o.RequesterPays, o.NoSignRequest = true, true, true, true
			o.AllowOverwrite, o.IncrementalUpload, o.AutoUnmount, o.AllowRoot = true, true, true, true
			o.LogMetrics, o.DebugCRT, o.PartSize = true, true, 10
		}},
		{"ttl zero is a zero duration", []string{"bkt", "/mnt", "--metadata-ttl", "0", "--negative-metadata-ttl", "0"}, func(o *Options) {
			o.MetadataTTL = ttl{set: true, zero: true}
			o.NegativeMetadataTTL = ttl{set: true, zero: true}
		}},
		{"memory target and CA bundle", []string{"bkt", "/mnt", "--memory-target", "512", "--ca-bundle=/etc/ca.pem"}, func(o *Options) {
			o.MemoryTarget, o.HasMemoryTarget, o.CABundle, o.HasCABundle = 512, true, "/etc/ca.pem", true
		}},
		{"rust integer syntax", []string{"bkt", "/mnt", "--uid", "+7", "--max-threads", "+3"}, func(o *Options) {
			o.UID, o.HasUID, o.MaxThreads = 7, true, 3
		}},
		{"fd 0 mount point", []string{"bkt", "/dev/fd/0"}, func(o *Options) { o.MountPoint = "/dev/fd/0" }},
		{"bucket arn", []string{"arn:aws:s3:::my/bucket", "/mnt"}, func(o *Options) { o.Bucket = "arn:aws:s3:::my/bucket" }},
		{"help wins over later errors", []string{"--help", "--nope"}, nil},
		{"version", []string{"-V"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseArgs(tc.args)
			if err != nil {
				t.Fatalf("parseArgs(%q): %v", tc.args, err)
			}
			if tc.want == nil {
				if !got.Help && !got.Version {
					t.Fatalf("parseArgs(%q) = %+v, want help or version", tc.args, got)
				}
				return
			}
			want := &Options{Bucket: "bkt", MountPoint: "/mnt"}
			tc.want(want)
			if d := cmp.Diff(want, got, cmp.AllowUnexported(ttl{})); d != "" {
				t.Fatalf("parseArgs(%q) mismatch (-want +got):\n%s", tc.args, d)
			}
		})
	}
}

func TestParseArgsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the error text
	}{
		{"unknown long", []string{"bkt", "/mnt", "--foo"}, "error: unexpected argument '--foo' found"},
		{"unknown short", []string{"-x", "bkt", "/mnt"}, "error: unexpected argument '-x' found"},
		{"third positional", []string{"bkt", "/mnt", "extra"}, "error: unexpected argument 'extra' found"},
		{"missing both", []string{"--read-only"}, "required arguments were not provided:\n  <BUCKET_NAME>\n  <DIRECTORY>"},
		{"missing directory", []string{"bkt"}, "required arguments were not provided:\n  <DIRECTORY>"},
		{"missing value at end", []string{"bkt", "/mnt", "--uid"}, "error: a value is required for '--uid <UID>' but none was supplied"},
		{"value looks like option", []string{"bkt", "/mnt", "--region", "--read-only"}, "a value is required for '--region <REGION>'"},
		{"flag with value", []string{"bkt", "/mnt", "--read-only=true"}, "error: unexpected value 'true' for '--read-only' found"},
		{"uid not a number", []string{"bkt", "/mnt", "--uid", "x"}, "error: invalid value 'x' for '--uid <UID>': invalid digit found in string"},
		{"uid zero", []string{"bkt", "/mnt", "--uid=0"}, "invalid value '0' for '--uid <UID>': 0 is not in 1..=4294967295"},
		{"gid too large", []string{"bkt", "/mnt", "--gid=4294967296"}, "invalid value '4294967296' for '--gid <GID>': 4294967296 is not in 1..=4294967295"},
		{"gid negative", []string{"bkt", "/mnt", "--gid=-1"}, "invalid value '-1' for '--gid <GID>': -1 is not in 1..=4294967295"},
		{"uid beyond i64", []string{"bkt", "/mnt", "--uid=9223372036854775808"}, "number too large to fit in target type"},
		{"memory target below 512", []string{"bkt", "/mnt", "--memory-target", "511"}, "invalid value '511' for '--memory-target <MiB>': 511 is not in 512..18446744073709551615"},
		{"memory target negative", []string{"bkt", "/mnt", "--memory-target=-1"}, "invalid value '-1' for '--memory-target <MiB>': invalid digit found in string"},
		{"max memory target is no option", []string{"bkt", "/mnt", "--max-memory-target", "1024"}, "error: unexpected argument '--max-memory-target' found"},
		{"part size u64 max", []string{"bkt", "/mnt", "--part-size=18446744073709551615"}, "18446744073709551615 is not in 1..18446744073709551615"},
		{"empty cache", []string{"bkt", "/mnt", "--cache="}, "a value is required for '--cache <DIRECTORY>' but none was supplied"},
		{"empty ca bundle", []string{"bkt", "/mnt", "--ca-bundle="}, "a value is required for '--ca-bundle <PATH>' but none was supplied"},
		{"empty mount point", []string{"bkt", ""}, "a value is required for '<DIRECTORY>' but none was supplied"},
		{"dir mode not octal", []string{"bkt", "/mnt", "--dir-mode", "789"}, "invalid value '789' for '--dir-mode <DIR_MODE>': must be a valid octal number"},
		{"file mode too big", []string{"bkt", "/mnt", "--file-mode", "4755"}, "only user/group/other permissions are supported"},
		{"threads zero", []string{"bkt", "/mnt", "--max-threads", "0"}, "invalid value '0' for '--max-threads <N>'"},
		{"throughput zero", []string{"bkt", "/mnt", "--maximum-throughput-gbps=0"}, "--maximum-throughput-gbps <N>"},
		{"part size zero", []string{"bkt", "/mnt", "--part-size=0"}, "invalid value '0' for '--part-size <SIZE>'"},
		{"bad ttl", []string{"bkt", "/mnt", "--metadata-ttl", "forever"}, "TTL must be a valid number of seconds"},
		{"bad bucket type", []string{"bkt", "/mnt", "--bucket-type", "fast"}, "invalid value 'fast' for '--bucket-type <BUCKET_TYPE>'\n  [possible values: general-purpose, directory]"},
		{"bad sse", []string{"bkt", "/mnt", "--sse", "kms"}, "[possible values: aws:kms, aws:kms:dsse, AES256]"},
		{"bad checksums", []string{"bkt", "/mnt", "--upload-checksums", "md5"}, "[possible values: crc32c, crc64nvme, off]"},
		{"kms alias", []string{"bkt", "/mnt", "--sse", "aws:kms", "--sse-kms-key-id", "alias/x"}, "KMS Key ARN is only accepted"},
		{"prefix without slash", []string{"bkt", "/mnt", "--prefix", "a/b"}, "invalid value 'a/b' for '--prefix <PREFIX>': prefix must end in '/'"},
		{"bad bucket", []string{"s3://bkt", "/mnt"}, "invalid value 's3://bkt' for '<BUCKET_NAME>'"},
		{"short bucket", []string{"ab", "/mnt"}, "bucket names must be 3-255 characters long"},
		{"repeated option", []string{"bkt", "/mnt", "--uid=1", "--uid=2"}, "the argument '--uid <UID>' cannot be used multiple times"},
		{"repeated flag", []string{"bkt", "/mnt", "--read-only", "--read-only"}, "the argument '--read-only' cannot be used multiple times"},
		{"allow other with root", []string{"bkt", "/mnt", "--allow-other", "--allow-root"}, "cannot be used with"},
		{"part size conflict", []string{"bkt", "/mnt", "--part-size=1", "--read-part-size=1"}, "the argument '--read-part-size <SIZE>' cannot be used with '--part-size <SIZE>'"},
		{"no-log conflict", []string{"bkt", "/mnt", "--no-log", "-d"}, "cannot be used with"},
		{"max cache size needs cache", []string{"bkt", "/mnt", "--max-cache-size", "10"}, "required arguments were not provided:\n  --cache <DIRECTORY>"},
		{"kms needs sse", []string{"bkt", "/mnt", "--sse-kms-key-id", "arn:aws:kms:r:1:key/k"}, "required arguments were not provided:\n  --sse <SSE>"},
		{"error before help", []string{"--nope", "--help"}, "unexpected argument '--nope'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseArgs(tc.args)
			if err == nil {
				t.Fatalf("parseArgs(%q) = %+v, want error containing %q", tc.args, o, tc.want)
			}
			if _, ok := err.(*usageError); !ok {
				t.Fatalf("parseArgs(%q) error %T, want *usageError", tc.args, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "error: ") {
				t.Fatalf("parseArgs(%q) error:\n%s\nwant it to start with 'error: ' and contain %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestRunExitCodes checks the exits that need no S3 server or mount.
func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, errSS string
	}{
		{"version", []string{"--version"}, 0, "mount-s3 1.24.0\n", ""},
		{"help", []string{"-h"}, 0, "Usage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>", ""},
		{"usage error", []string{"bkt"}, 2, "", "error: the following required arguments"},
		{"missing mount point", []string{"bkt", "/nonexistent/dir", "-f"}, 1, "", "Error: Failed to create mount point\n\nCaused by:\n    mount point /nonexistent/dir does not exist"},
		{"bad fd", []string{"bkt", "/dev/fd/987", "-f"}, 1, "", "Error: Failed to create mount point\n\nCaused by:\n    mount point /dev/fd/987 is not a valid file descriptor"},
		{"kms with AES256", []string{"bkt", t.TempDir(), "-f", "--sse", "AES256", "--sse-kms-key-id", "arn:aws:kms:r:1:key/k"}, 1, "", "--sse-kms-key-id can not be used with --sse AES256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Fatalf("run(%q) = %d, want %d; stderr:\n%s", tc.args, code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.errSS) {
				t.Fatalf("run(%q):\nstdout: %q (want %q)\nstderr: %q (want %q)", tc.args, stdout.String(), tc.out, stderr.String(), tc.errSS)
			}
		})
	}
}

func TestTTLs(t *testing.T) {
	parse := func(args ...string) *Options {
		o, err := parseArgs(append([]string{"bkt", "/mnt"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	year100 := 100 * 365 * 24 * time.Hour
	for _, tc := range []struct {
		name           string
		o              *Options
		file, dir, neg time.Duration
	}{
		{"default minimal", parse(), 0, time.Second, 0},
		{"zero is minimal", parse("--metadata-ttl=0"), 0, time.Second, 0},
		{"negative zero is zero", parse("--metadata-ttl=60", "--negative-metadata-ttl=0"), time.Minute, time.Minute, 0},
		{"seconds", parse("--metadata-ttl=5"), 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{"cache default", parse("--cache=/c"), time.Minute, time.Minute, time.Minute},
		{"indefinite with negative", parse("--metadata-ttl=indefinite", "--negative-metadata-ttl=2"), year100, year100, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, d, n := ttls(tc.o)
			if f != tc.file || d != tc.dir || n != tc.neg {
				t.Fatalf("ttls = %v/%v/%v, want %v/%v/%v", f, d, n, tc.file, tc.dir, tc.neg)
			}
		})
	}
}

func TestParseFuseFD(t *testing.T) {
	for in, want := range map[string]int{"/dev/fd/3": 3, "/dev/fd/0": 0, "/dev/fd/03": 3, "/dev/fd/x": -1, "/mnt": -1, "/dev/fd/": -1,
		"/dev/fd/3/": -1, "/dev/fd/-1": -1, "/dev/fd/2147483648": -1, " /dev/fd/3": -1} {
		n, ok := parseFuseFD(in)
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("parseFuseFD(%q) = %d, want %d", in, n, want)
		}
	}
}
