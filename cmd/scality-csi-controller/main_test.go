package main

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
		var o options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse([]string{"--mountpoint-image=img", "--mountpoint-image-pull-secrets=" + tc.value}); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.reconcilerConfig()
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
	for value, wantErr := range map[string]string{"50": "", "100": "", "5": "--gc-percent must be between 10 and 1000, not 5", "2000": "--gc-percent must be between 10 and 1000"} {
		var o options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse([]string{"--mountpoint-image=img", "--gc-percent=" + value}); err != nil {
			t.Fatal(err)
		}
		_, err := o.reconcilerConfig()
		if wantErr == "" && err != nil {
			t.Errorf("--gc-percent=%s: %v", value, err)
		}
		if wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("--gc-percent=%s: error %v, want one saying %q", value, err, wantErr)
		}
	}
}
