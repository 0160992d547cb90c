package main

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
)

// driverOnly are the policy's options that are not mount-s3's: the driver turns them into
// something else before mount-s3 runs (aws-max-attempts becomes AWS_MAX_ATTEMPTS) or refuses
// them with a pointer to the right form (o: fstab-style options). (ca-bundle is mount-s3's
// own since 1.23.0: the stand-in parses it, the policy refuses it.)
var driverOnly = []string{"aws-max-attempts", "o"}

// TestPolicyKnowsEveryOption (CONFORMANCE.md, row O1): the driver's option policy knows every
// option of mount-s3's command line, and accepts none that mount-s3 does not have. An option of
// mount-s3 the policy does not know would be refused as "unknown" instead of with a reason; an
// option the policy accepts and mount-s3 does not have would fail every mount that uses it
// (the policy may know such an option to refuse it with a pointer, as it does for
// max-memory-target, which no mount-s3 release has).
func TestPolicyKnowsEveryOption(t *testing.T) {
	known := mountargs.KnownOptions()
	for _, s := range specs {
		if !slices.Contains(known, s.long) {
			t.Errorf("mount-s3 option --%s is unknown to the driver's policy (pkg/mountargs specs): accept it or refuse it with a reason", s.long)
		}
	}
	for _, name := range known {
		if findSpec(name, "") != nil || slices.Contains(driverOnly, name) {
			continue
		}
		for _, flag := range []string{name, name + "=1", name + "=1024"} {
			if _, err := mountargs.Build(mountargs.Options{MountFlags: []string{flag}, UserAgentPrefix: "ua"}); !errors.Is(err, mountargs.ErrInvalid) {
				t.Errorf("the driver's policy accepts %q, but mount-s3 has no --%s: every mount using it would fail with a usage error (exit 2)", flag, name)
				break
			}
		}
	}
}

// candidateValues are tried as the value of every option: bounds, syntaxes and spellings
// that one option or another accepts or refuses.
var candidateValues = []string{
	"0", "1", "+5", "-1", "10", "4294967295", "4294967296", "18446744073709551615", "18446744073709551616",
	"3153600000", "3153600001", "minimal", "indefinite", "1h",
	"0777", "777", "0660", "1000", "4755", "rw",
	"ab", "abc", "a.b-c_d", "cache--usw2-az1--x-s3", "a:b/c", strings.Repeat("a", 64),
	"eth0", "eth0.100", strings.Repeat("e", 15), strings.Repeat("e", 16), "..",
	"arn:aws:kms:us-east-1:123456789012:key/1234abcd", "arn:aws:kms:us-east-1:123456789012:alias/a", "alias/a", "arn:x",
	"AES256", "aws:kms", "aws:kms:dsse", "crc32c", "crc64nvme", "off", "md5",
	"general-purpose", "directory", "data/", "/data/", "data",
	"STANDARD", "eu-west-1", "123456789012", "http://127.0.0.1:4318",
}

// companions are added to some tries so that options that require another one (sse-kms-key-id
// needs sse, max-cache-size needs cache) are tried with it too.
var companions = [][]string{nil, {"sse=aws:kms"}, {"cache"}}

// TestPolicyBuildsWhatMountS3Parses (CONFORMANCE.md, rows O2-O4): every set of options the
// driver's policy accepts is a command line mount-s3 parses, option by option and value by
// value; so a PV's mount options either fail NodePublish with InvalidArgument, or reach a
// mount-s3 that takes them, never a usage error at mount time.
func TestPolicyBuildsWhatMountS3Parses(t *testing.T) {
	accepted, refused := 0, 0
	try := func(flags []string) {
		t.Helper()
		r, err := mountargs.Build(mountargs.Options{MountFlags: flags, UserAgentPrefix: "s3.csi.scality.com/test"})
		if err != nil {
			if !errors.Is(err, mountargs.ErrInvalid) {
				t.Errorf("Build(%q) = %v, not an ErrInvalid", flags, err)
			}
			refused++
			return
		}
		accepted++
		argv, _ := mountargs.SetOwnedPaths(r.Args.List(), func(name string) string { return "/var/lib/s3csi/" + name })
		argv = append(argv, "bucket", "/mnt/target")
		if _, err := parseArgs(argv); err != nil {
			t.Errorf("the policy accepts %q, but mount-s3 refuses the command line %q:\n%v", flags, argv, err)
		}
	}
	for _, s := range specs {
		for _, extra := range companions {
			if s.value == "" {
				try(append([]string{s.long}, extra...))
				continue
			}
			for _, v := range candidateValues {
				try(append([]string{s.long + "=" + v}, extra...))
			}
		}
	}
	// The options the driver adds itself, with and without the ones they relate to.
	for _, ro := range []bool{false, true} {
		for _, fsGroup := range []string{"", "2000"} {
			for _, flags := range [][]string{nil, {"allow-root"}, {"allow-other"}, {"gid=3000"}} {
				r, err := mountargs.Build(mountargs.Options{MountFlags: flags, ReadOnly: ro, FSGroup: fsGroup, UserAgentPrefix: "ua"})
				if err != nil {
					t.Errorf("Build(%q, read-only %t, fsGroup %q): %v", flags, ro, fsGroup, err)
					continue
				}
				if _, err := parseArgs(append(r.Args.List(), "bucket", "/mnt/target")); err != nil {
					t.Errorf("Build(%q, read-only %t, fsGroup %q) = %q, which mount-s3 refuses:\n%v", flags, ro, fsGroup, r.Args.List(), err)
				}
			}
		}
	}
	// Both outcomes must happen often, or the sweep tested nothing.
	if accepted < 200 || refused < 1000 {
		t.Errorf("only %d accepted and %d refused option sets: the candidate values no longer exercise the policy", accepted, refused)
	}
	t.Logf("%d option sets accepted by the policy and parsed by mount-s3, %d refused by the policy", accepted, refused)
}

// TestConformanceListsEveryOption (row O1): CONFORMANCE.md has a row for every option the
// stand-in parses, and none for an option it does not.
func TestConformanceListsEveryOption(t *testing.T) {
	b, err := os.ReadFile("CONFORMANCE.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, f := range strings.Split(first, ",") {
			if name, ok := strings.CutPrefix(strings.Trim(strings.TrimSpace(f), "`"), "--"); ok {
				listed[name] = true
			}
		}
	}
	for _, s := range specs {
		if !listed[s.long] {
			t.Errorf("CONFORMANCE.md has no row for --%s", s.long)
		}
		delete(listed, s.long)
	}
	for name := range listed {
		t.Errorf("CONFORMANCE.md lists --%s, which mount-s3 (the stand-in) does not parse", name)
	}
}
