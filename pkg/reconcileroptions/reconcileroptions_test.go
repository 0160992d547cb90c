package reconcileroptions

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestPullSecretsFlag(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []corev1.LocalObjectReference
		err   string
	}{
		{value: ""},
		{value: "regcred", want: []corev1.LocalObjectReference{{Name: "regcred"}}},
		{value: "a, b.example,", want: []corev1.LocalObjectReference{{Name: "a"}, {Name: "b.example"}}},
		{value: "Bad_Name", err: `--mountpoint-image-pull-secrets: "Bad_Name" is not a Secret name`},
		{value: "../x", err: `"../x" is not a Secret name`},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--mountpoint-image=img", "--mountpoint-image-pull-secrets=" + tc.value}); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		if diff := cmp.Diff(tc.want, cfg.MountpointPod.ImagePullSecrets); diff != "" {
			t.Errorf("%q: pull secrets (-want +got):\n%s", tc.value, diff)
		}
	}
}

func TestGCPercentFlag(t *testing.T) {
	// The default is below Go's 100: at 20,000 pods it keeps the peak RSS under 120 MiB
	// (docs/development.md); the flag's value is what run passes to debug.SetGCPercent.
	var d Options
	dfs := flag.NewFlagSet("test", flag.ContinueOnError)
	d.AddFlags(dfs)
	if err := dfs.Parse([]string{"--mountpoint-image=img"}); err != nil {
		t.Fatal(err)
	}
	if d.GcPercent != 75 {
		t.Errorf("--gc-percent defaults to %d, want 75", d.GcPercent)
	}
	for value, wantErr := range map[string]string{"50": "", "100": "", "5": "--gc-percent must be between 10 and 1000, not 5", "2000": "--gc-percent must be between 10 and 1000"} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--mountpoint-image=img", "--gc-percent=" + value}); err != nil {
			t.Fatal(err)
		}
		_, err := o.Config()
		if wantErr == "" && err != nil {
			t.Errorf("--gc-percent=%s: %v", value, err)
		}
		if wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("--gc-percent=%s: error %v, want one saying %q", value, err, wantErr)
		}
	}
}

func TestResourceFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
		check   func(t *testing.T, r corev1.ResourceRequirements)
	}{
		{args: nil, check: func(t *testing.T, r corev1.ResourceRequirements) {
			if len(r.Requests)+len(r.Limits) != 0 {
				t.Errorf("no flag gave resources %+v", r)
			}
		}},
		{args: []string{"--mountpoint-cpu-request=50m", "--mountpoint-memory-request=128Mi", "--mountpoint-memory-limit=1Gi"}, check: func(t *testing.T, r corev1.ResourceRequirements) {
			if q := r.Requests[corev1.ResourceCPU]; q.String() != "50m" {
				t.Errorf("CPU request %s", q.String())
			}
			if q := r.Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
				t.Errorf("memory limit %s", q.String())
			}
			if _, ok := r.Limits[corev1.ResourceCPU]; ok {
				t.Error("a CPU limit nobody asked for")
			}
		}},
		{args: []string{"--mountpoint-memory-limit=much"}, wantErr: `--mountpoint-memory-limit: "much" is not a Kubernetes quantity`},
		{args: []string{"--mountpoint-cpu-request=0"}, wantErr: "--mountpoint-cpu-request: \"0\" must be more than zero"},
		{args: []string{"--mountpoint-memory-request=2Gi", "--mountpoint-memory-limit=1Gi"}, wantErr: "memory request 2Gi is above its limit 1Gi"},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(append([]string{"--mountpoint-image=img"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config()
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.check != nil:
			tc.check(t, cfg.MountpointPod.Resources)
		}
	}
}

func TestCacheSizeLimitFlag(t *testing.T) {
	for value, wantErr := range map[string]string{
		"":      "",
		"1Gi":   "",
		"64Mi":  "--mountpoint-cache-size-limit: a cache volume of 64Mi is too small; use at least 128Mi",
		"large": `--mountpoint-cache-size-limit: "large" is not a Kubernetes quantity`,
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--mountpoint-image=img", "--mountpoint-cache-size-limit=" + value}); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config()
		switch {
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%q: error %v, want one saying %q", value, err, wantErr)
		case wantErr == "" && err != nil:
			t.Errorf("%q: %v", value, err)
		case wantErr == "" && (value == "") != (cfg.MountpointPod.CacheSizeLimit == nil):
			t.Errorf("%q: limit %v", value, cfg.MountpointPod.CacheSizeLimit)
		}
	}
}
