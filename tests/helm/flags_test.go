package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// runBinary runs bin/<name> with args and no environment (the flags alone must parse) and
// returns its combined output and exit code.
func runBinary(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Bin(t, name), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	default:
		t.Fatalf("run %s: %v", name, err)
		return "", -1
	}
}

// stopFlag is the flag appended to the chart's arguments so a binary parses them all and then
// exits 0 without doing anything: every project binary has --version.
func stopFlag(t *testing.T, name string) string {
	t.Helper()
	if out, code := runBinary(t, name, "--version"); code != 0 {
		t.Fatalf("%s --version: exit %d: %s", name, code, out)
	}
	return "--version"
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand resolves $(VAR) references the way kubelet does, from the container's env: literal
// values as they are, values from elsewhere (Downward API, Secrets) as a placeholder.
func expand(args []string, env []corev1.EnvVar) []string {
	vals := map[string]string{}
	for _, e := range env {
		if e.ValueFrom != nil {
			vals[e.Name] = "placeholder-" + strings.ToLower(e.Name)
		} else {
			vals[e.Name] = e.Value
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := vals[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return out
}

// TestFlagsAcceptedByBinaries runs every project binary the chart renders (node plugin,
// install-mp, CSI controller, Pod Reconciler) with exactly the arguments of its container, in
// each mode, plus a flag that makes it exit before doing anything: an unknown flag or a value
// its type refuses fails the test (Go's flag package exits 2), so the chart cannot drift from
// the code. Values the flag package cannot check (JSON, durations kept as text) are decoded
// here.
func TestFlagsAcceptedByBinaries(t *testing.T) {
	stops := map[string]string{}
	seen := map[string]bool{}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, objs := m.render(t)
			for _, o := range objs {
				var spec corev1.PodSpec
				switch o.GetKind() {
				case "DaemonSet", "Deployment":
					spec = typedPodSpec(t, o.Object)
				default:
					continue
				}
				for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
					name, abs := ourBinary(c.Command)
					if name == "" {
						if len(c.Command) > 0 {
							t.Errorf("%s/%s runs %v, not a binary of cmd/", o.GetName(), c.Name, c.Command)
						}
						continue
					}
					if !abs || c.Command[0] != "/bin/"+name || len(c.Command) != 1 {
						t.Errorf("%s/%s: command %v; the image has /bin/%s", o.GetName(), c.Name, c.Command, name)
					}
					if _, ok := stops[name]; !ok {
						stops[name] = stopFlag(t, name)
					}
					args := expand(c.Args, c.Env)
					for _, a := range args {
						if strings.Contains(a, "$(") {
							t.Errorf("%s/%s: %q refers to a variable the container does not define", o.GetName(), c.Name, a)
						}
					}
					out, code := runBinary(t, name, append(args, stops[name])...)
					if code != 0 {
						t.Errorf("%s/%s: %s refuses the chart's arguments %q (exit %d):\n%s", o.GetName(), c.Name, name, c.Args, code, firstLines(out, 5))
					}
					seen[name] = true
					checkValues(t, o.GetName()+"/"+c.Name, args)
				}
			}
		})
	}
	// The Mountpoint Pods run scality-csi-mounter with its defaults (the Pod Reconciler builds
	// them); every other binary must be run by the chart.
	for _, b := range ourBinaries {
		if b != "scality-csi-mounter" && !seen[b] {
			t.Errorf("no container of any mode runs %s", b)
		}
	}
	if out, code := runBinary(t, "scality-csi-mounter", "--version"); code != 0 {
		t.Errorf("scality-csi-mounter --version: exit %d: %s", code, out)
	}
}

// checkValues decodes the flag values whose syntax the binaries check only after --version.
func checkValues(t *testing.T, where string, args []string) {
	t.Helper()
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok {
			continue
		}
		switch name {
		case "mountpoint-tolerations":
			dec := json.NewDecoder(strings.NewReader(value))
			dec.DisallowUnknownFields()
			var tol []corev1.Toleration
			if err := dec.Decode(&tol); err != nil {
				t.Errorf("%s: --%s is not a JSON list of tolerations: %v", where, name, err)
			}
		case "mount-timeout", "pod-sweep-interval", "api-timeout", "empty-bucket-budget", "timeout":
			if d, err := time.ParseDuration(value); err != nil || d <= 0 {
				t.Errorf("%s: --%s=%s is not a positive duration", where, name, value)
			}
		case "default-mounter":
			if value != "systemd" && value != "pod" {
				t.Errorf("%s: --%s=%s", where, name, value)
			}
		case "kubelet-path", "mount-s3-path", "install-dir", "source-dir", "s3-ca-bundle", "systemd-socket", "mountpoint-command":
			if !strings.HasPrefix(value, "/") {
				t.Errorf("%s: --%s=%s is not absolute", where, name, value)
			}
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// typedPodSpec returns the pod template's spec of a rendered workload.
func typedPodSpec(t *testing.T, obj map[string]any) corev1.PodSpec {
	t.Helper()
	m, found, err := unstructured.NestedMap(obj, "spec", "template", "spec")
	if err != nil || !found {
		t.Fatalf("no pod template: %v", err)
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m, &spec, true); err != nil {
		t.Fatalf("pod template: %v", err)
	}
	return spec
}
