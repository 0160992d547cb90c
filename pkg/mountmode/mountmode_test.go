package mountmode

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		labels  map[string]string
		def     Mode
		want    Mode
		wantErr string
	}{
		{nil, Pod, Pod, ""},
		{map[string]string{"other": "x"}, Systemd, Systemd, ""},
		{map[string]string{Label: "systemd"}, Pod, Systemd, ""},
		{map[string]string{Label: "pod"}, Systemd, Pod, ""},
		{map[string]string{Label: "Pod"}, Systemd, Systemd, `"Pod" is not one of`},
		{map[string]string{Label: "legacy"}, Pod, Pod, `"legacy" is not one of`},
		{map[string]string{Label: ""}, Pod, Pod, "using the default pod"},
	}
	for _, tc := range tests {
		got, err := Resolve(tc.labels, tc.def)
		if got != tc.want {
			t.Errorf("Resolve(%v, %s) = %s, want %s", tc.labels, tc.def, got, tc.want)
		}
		if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Resolve(%v) err = %v, want %q", tc.labels, err, tc.wantErr)
		}
	}
	if _, err := Parse("daemonset"); err == nil {
		t.Error("Parse accepted an unknown mode")
	}
}
