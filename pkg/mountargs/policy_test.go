package mountargs

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// policyRow is one option of the policy table (specs) with what the driver must accept and
// refuse for it. TestPolicyTable fails when an option of specs has no row, so a new option
// cannot be added without deciding its policy in a test.
type policyRow struct {
	accept []string // spellings that must build
	refuse []string // spellings that must be refused, naming the option
	reason string   // part of the refusal message
}

var policyRows = map[string]policyRow{
	"prefix":                  {accept: []string{"--prefix a/b/"}, refuse: []string{"prefix=/abs/", "prefix=data"}, reason: "end with '/'"},
	"region":                  {accept: []string{"region=eu-west-1"}, refuse: []string{"region=a b", "--region=/etc/x;y"}, reason: ""},
	"force-path-style":        {accept: []string{"force-path-style"}, refuse: []string{"force-path-style=1"}, reason: "takes no value"},
	"transfer-acceleration":   {refuse: []string{"transfer-acceleration", "transfer-acceleration=yes"}, reason: "S3's endpoint rules refuse"},
	"dual-stack":              {refuse: []string{"dual-stack", "dual-stack=/"}, reason: "S3's endpoint rules refuse"},
	"requester-pays":          {accept: []string{"requester-pays"}, refuse: []string{"requester-pays=x"}, reason: "takes no value"},
	"bucket-type":             {accept: []string{"bucket-type=directory"}, refuse: []string{"bucket-type=/tmp"}, reason: "one of"},
	"storage-class":           {accept: []string{"storage-class=STANDARD_IA"}, refuse: []string{"storage-class=" + strings.Repeat("A", 65)}, reason: "longer than"},
	"expected-bucket-owner":   {accept: []string{"expected-bucket-owner=123456789012"}, refuse: []string{"expected-bucket-owner=a*b"}, reason: "metacharacter"},
	"sse":                     {accept: []string{"sse=AES256"}, refuse: []string{"sse=none"}, reason: "one of"},
	"sse-kms-key-id":          {accept: []string{"sse=aws:kms", "sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab"}, refuse: []string{"sse-kms-key-id=1234abcd-12ab", "sse-kms-key-id=alias/k", "sse-kms-key-id=arn:aws:kms:us-east-1:123456789012:alias/k"}, reason: "must be a KMS key ARN"},
	"upload-checksums":        {accept: []string{"upload-checksums=crc64nvme"}, refuse: []string{"upload-checksums=md5"}, reason: "one of"},
	"ca-bundle":               {refuse: []string{"ca-bundle=/etc/shadow", "--ca-bundle /x"}, reason: "cluster-wide"},
	"endpoint-url":            {refuse: []string{"endpoint-url=http://169.254.169.254"}, reason: "cluster-wide"},
	"no-sign-request":         {accept: []string{"no-sign-request"}, refuse: []string{"no-sign-request=1"}, reason: "takes no value"},
	"profile":                 {refuse: []string{"profile=default"}, reason: "credentials are managed"},
	"read-only":               {accept: []string{"read-only"}, refuse: []string{"read-only=false"}, reason: "takes no value"},
	"allow-delete":            {accept: []string{"allow-delete"}, refuse: []string{"allow-delete=yes"}, reason: "takes no value"},
	"allow-overwrite":         {accept: []string{"allow-overwrite"}, refuse: []string{"allow-overwrite=1"}, reason: "takes no value"},
	"incremental-upload":      {accept: []string{"incremental-upload"}, refuse: []string{"incremental-upload=1"}, reason: "takes no value"},
	"auto-unmount":            {accept: []string{"auto-unmount"}, refuse: []string{"auto-unmount=1"}, reason: "takes no value"},
	"allow-root":              {accept: []string{"allow-root"}, refuse: []string{"allow-root", "allow-other"}, reason: "cannot be combined"},
	"allow-other":             {accept: []string{"allow-other"}, refuse: []string{"allow-other=1"}, reason: "takes no value"},
	"uid":                     {accept: []string{"uid=1000"}, refuse: []string{"uid=0"}, reason: "between 1 and"},
	"gid":                     {accept: []string{"gid 2000"}, refuse: []string{"gid=-1"}, reason: "between 1 and"},
	"dir-mode":                {accept: []string{"dir-mode=0755"}, refuse: []string{"dir-mode=4755"}, reason: "octal"},
	"file-mode":               {accept: []string{"file-mode=644"}, refuse: []string{"file-mode=rw"}, reason: "octal"},
	"foreground":              {refuse: []string{"foreground", "-f"}, reason: "the driver decides"},
	"negative-metadata-ttl":   {accept: []string{"negative-metadata-ttl=minimal"}, refuse: []string{"negative-metadata-ttl=-1"}, reason: "seconds"},
	"metadata-ttl":            {accept: []string{"metadata-ttl=3153600000"}, refuse: []string{"metadata-ttl=1h", "metadata-ttl=3153600001"}, reason: "seconds"},
	"maximum-throughput-gbps": {accept: []string{"maximum-throughput-gbps=10"}, refuse: []string{"maximum-throughput-gbps=0"}, reason: "at least 1"},
	"max-threads":             {accept: []string{"max-threads=8"}, refuse: []string{"max-threads=x"}, reason: "decimal"},
	"part-size":               {accept: []string{"part-size=5242880"}, refuse: []string{"part-size=0", "part-size=5242879", "part-size=5368709121", "part-size=8M"}, reason: "between 5242880 (5 MiB) and 5368709120 (5 GiB)"},
	"read-part-size":          {accept: []string{"read-part-size=5368709120"}, refuse: []string{"read-part-size=1e6", "read-part-size=1048576"}, reason: "between 5242880"},
	"write-part-size":         {accept: []string{"write-part-size=8388608"}, refuse: []string{"write-part-size=4194304"}, reason: "between 5242880"},
	"memory-target":           {accept: []string{"memory-target=65536"}, refuse: []string{"memory-target=511", "memory-target=0", "memory-target=2G"}, reason: "at least 512"},
	"max-memory-target":       {refuse: []string{"max-memory-target=2048"}, reason: "it is memory-target now; write memory-target=<MiB>"},
	"bind":                    {accept: []string{"bind=eth0.100", "bind=eth1"}, refuse: []string{"bind=" + strings.Repeat("e", 16), "bind=../../etc", "bind=/dev/x", "bind=.."}, reason: "network interface name"},
	// Options that would name a host path, in every spelling mount-s3 accepts.
	"log-directory":        {refuse: []string{"log-directory=/etc/cron.d", "--log-directory /", "-l /", "-l=/var/log", "l /tmp", "log-directory=relative"}, reason: "names a host path"},
	"cache":                {accept: []string{"cache", "--cache", "cache", "max-cache-size=100"}, refuse: []string{"cache=/", "--cache=/etc", "--cache /var/lib/kubelet", "cache=tmp", "cache=/tmp/../etc", "-cache=/", "cache="}, reason: "takes no path"},
	"log-metrics":          {accept: []string{"log-metrics"}, refuse: []string{"log-metrics=/tmp"}, reason: "takes no value"},
	"debug":                {accept: []string{"debug", "-d"}, refuse: []string{"debug=/tmp"}, reason: "takes no value"},
	"debug-crt":            {accept: []string{"debug-crt"}, refuse: []string{"debug-crt", "no-log"}, reason: "cannot be combined"},
	"no-log":               {accept: []string{"no-log"}, refuse: []string{"no-log=1"}, reason: "takes no value"},
	"max-cache-size":       {accept: []string{"cache", "max-cache-size=1024"}, refuse: []string{"max-cache-size=1024"}, reason: "requires --cache"},
	"cache-xz":             {accept: []string{"cache-xz=cache--usw2-az1--x-s3"}, refuse: []string{"cache-xz=/tmp/x`y`", "cache-xz=ab", "cache-xz=a:b/c"}, reason: "cache-xz"},
	"infer-content-type":   {accept: []string{"infer-content-type"}, refuse: []string{"infer-content-type=1"}, reason: "takes no value"},
	"otlp-endpoint":        {refuse: []string{"otlp-endpoint=http://127.0.0.1:4318"}, reason: "send metrics"},
	"otlp-export-interval": {refuse: []string{"otlp-export-interval=60"}, reason: "otlp-endpoint"},
	"user-agent-prefix":    {refuse: []string{"user-agent-prefix=x"}, reason: "the driver sets"},
	"aws-max-attempts":     {accept: []string{"aws-max-attempts=3"}, refuse: []string{"aws-max-attempts=0"}, reason: "at least 1"},
	"help":                 {refuse: []string{"help", "-h"}, reason: "not a mount option"},
	"version":              {refuse: []string{"version", "-V"}, reason: "not a mount option"},
	"o":                    {refuse: []string{"-o allow_other", "o=ro"}, reason: "fstab-style"},
}

// TestPolicyTable: one row per option of the policy (specs): its accepted spellings build,
// its refused ones fail naming the option, and no option is left without a row.
func TestPolicyTable(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		row, ok := policyRows[name]
		if !ok {
			t.Errorf("option %q has no row in policyRows: decide and test its policy", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			if row.accept != nil {
				if _, err := Build(Options{MountFlags: row.accept, UserAgentPrefix: ua}); err != nil {
					t.Errorf("Build(%q) = %v, want success", row.accept, err)
				}
			}
			if len(row.refuse) == 0 {
				t.Fatal("row has no refused spelling")
			}
			// A refused row is either one set of options (relations) or single options.
			sets := [][]string{row.refuse}
			if row.reason != "cannot be combined" {
				sets = nil
				for _, r := range row.refuse {
					sets = append(sets, []string{r})
				}
			}
			for _, set := range sets {
				_, err := Build(Options{MountFlags: set, UserAgentPrefix: ua})
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
					t.Errorf("Build(%q) = %v, want a refusal (*Error wrapping ErrInvalid)", set, err)
					continue
				}
				if !strings.Contains(err.Error(), row.reason) {
					t.Errorf("Build(%q) = %q, want the reason %q", set, err, row.reason)
				}
			}
		})
	}
	for name := range policyRows {
		if _, ok := specs[name]; !ok {
			t.Errorf("policyRows has %q, which specs does not know", name)
		}
	}
}

func TestSetOwnedPaths(t *testing.T) {
	r, err := Build(Options{MountFlags: []string{"cache", "max-cache-size=10", "allow-delete"}, UserAgentPrefix: ua})
	if err != nil {
		t.Fatal(err)
	}
	got, filled := SetOwnedPaths(r.Args.List(), func(name string) string { return "/state/" + name })
	want := []string{"--allow-delete", "--cache=/state/cache", "--force-path-style", "--max-cache-size=10", "--user-agent-prefix=" + ua}
	if !slices.Equal(got, want) || !slices.Equal(filled, []string{"cache"}) {
		t.Errorf("SetOwnedPaths = %q, %q; want %q, [cache]", got, filled, want)
	}
	plain, filled := SetOwnedPaths([]string{"--allow-delete", "--cache-xz=x"}, func(string) string { return "/x" })
	if !slices.Equal(plain, []string{"--allow-delete", "--cache-xz=x"}) || filled != nil {
		t.Errorf("SetOwnedPaths without cache = %q, %q", plain, filled)
	}
}
