package cluster

import (
	"flag"
	"regexp"
	"testing"

	"github.com/s3csi/s3-csi-driver/tests/scality"
)

var only = flag.String("only", "", "run only the steps whose name matches this regular expression (for development; the chart is installed anyway)")

// TestCluster is the whole suite, in order: the chart is installed once, the upstream storage
// e2e suites run in systemd mode then in pod mode, then the project's scenarios, and finally
// the uninstall. Every step cleans up after itself and checks that nothing is left on the node.
func TestCluster(t *testing.T) {
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"install", testInstall},
		{"e2e-systemd", func(t *testing.T) { testE2E(t, "systemd") }},
		{"e2e-pod", func(t *testing.T) { testE2E(t, "pod") }},
		{"static-systemd", func(t *testing.T) { testStatic(t, "systemd") }},
		{"static-pod", func(t *testing.T) { testStatic(t, "pod") }},
		{"static-mixed", testMixed},
		{"monitoring", testMonitoring},
		{"examples", testExamples},
		{"doc-commands", testDocCommands},
		{"migration-with-writers", testMigration},
		{"dynamic-deletion-policies", testDynamic},
		{"fsgroup-readonly-systemd", func(t *testing.T) { testFSGroupReadOnly(t, "systemd") }},
		{"fsgroup-readonly-pod", func(t *testing.T) { testFSGroupReadOnly(t, "pod") }},
		{"credential-rotation", testRotation},
		{"node-plugin-restart", testNodePluginRestart},
		{"node-scoped-writes", testNodeScopedWrites},
		{"tenant-isolation-systemd", func(t *testing.T) { testTenantIsolation(t, "systemd") }},
		{"tenant-isolation-pod", func(t *testing.T) { testTenantIsolation(t, "pod") }},
		{"mount-health-systemd", func(t *testing.T) { testMountHealth(t, "systemd") }},
		{"mount-health-pod", func(t *testing.T) { testMountHealth(t, "pod") }},
		{"mountpoint-pod-unplaceable", testUnplaceable},
		{"fallback-to-systemd", testFallback},
		{"mountpoint-headroom", testHeadroom},
		{"mountpoint-oom", testMountpointOOM},
		{"memory-target", testMemoryTarget},
		{"mountpoint-cpu-limit", testMountpointCPULimit},
		{"controller-restart-burst", testControllerBurst},
		{"drain", testDrain},
		{"upgrade-rollback", testUpgradeRollback},
		{"reboot", testReboot},
	}
	// Scality's releases users run, each taken over by every path (upgrade -f,
	// --reuse-values, rollback, GitOps) with writers running.
	for _, r := range scality.Releases {
		steps = append(steps, struct {
			name string
			f    func(*testing.T)
		}{"upgrade-from-scality-" + string(r), func(t *testing.T) { testUpgradeFromScality(t, r) }})
	}
	// A second node joins (and is gone again after the step), then the chart goes.
	steps = append(steps, []struct {
		name string
		f    func(*testing.T)
	}{{"two-nodes", testTwoNodes}, {"uninstall", testUninstall}}...)
	for _, s := range steps {
		if *only != "" && s.name != "install" && !regexp.MustCompile(*only).MatchString(s.name) {
			continue
		}
		ok := t.Run(s.name, func(t *testing.T) {
			defer step(t)()
			defer nodePluginLogOnFailure(t)
			s.f(t)
		})
		if !ok && s.name == "install" {
			t.Fatal("the chart did not install; nothing else can run")
		}
	}
}
