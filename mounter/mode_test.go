package mounter

import (
	"strings"
	"testing"
)

func TestResolveMode(t *testing.T) {
	tests := []struct {
		labels  map[string]string
		def     Mode
		want    Mode
		wantErr string
	}{
		{nil, ModePod, ModePod, ""},
		{map[string]string{"other": "x"}, ModeSystemd, ModeSystemd, ""},
		{map[string]string{LabelMounter: "systemd"}, ModePod, ModeSystemd, ""},
		{map[string]string{LabelMounter: "pod"}, ModeSystemd, ModePod, ""},
		{map[string]string{LabelMounter: "Pod"}, ModeSystemd, ModeSystemd, `"Pod" is not one of`},
		{map[string]string{LabelMounter: ""}, ModePod, ModePod, "using the default pod"},
	}
	for _, tc := range tests {
		got, err := ResolveMode(tc.labels, tc.def)
		if got != tc.want {
			t.Errorf("ResolveMode(%v, %s) = %s, want %s", tc.labels, tc.def, got, tc.want)
		}
		if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ResolveMode(%v) err = %v, want %q", tc.labels, err, tc.wantErr)
		}
	}
	if _, err := ParseMode("daemonset"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
}
