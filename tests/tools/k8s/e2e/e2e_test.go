// Package e2e builds bin/k8s/e2e.test: the upstream Kubernetes end-to-end framework
// (k8s.io/kubernetes/test/e2e, the same suite setup, flags and reporting as upstream's
// e2e.test) with only the storage suites' External Storage driver registered
// (k8s.io/kubernetes/test/e2e/storage/external and the testsuites it runs: volumes,
// provisioning, multiVolume, subPath, volumeIO, volumeMode, fsgroupchangepolicy, ephemeral,
// ...). The other SIGs' suites are left out of the binary, which makes it build in a fraction
// of the full e2e.test's time; the specs it runs are upstream's, unchanged.
//
// Built by tools.mk (`go test -c` in this wrapper module); run by tests/cluster with
// --storage.testdriver=tests/cluster/testdriver.yaml.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/component-base/version"
	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// The constants upstream's e2e.test freezes.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The External Storage framework: registers --storage.testdriver and its specs.
	_ "k8s.io/kubernetes/test/e2e/storage/external"

	// Framework reconfiguration, as upstream's e2e.test does it.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	showVersion := flag.CommandLine.Bool("version", false, "Displays version information.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
