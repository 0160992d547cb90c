package mounter

import (
	"fmt"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Mode is how a node mounts volumes.
type Mode string

const (
	// ModeSystemd runs mount-s3 as a transient systemd unit on the host (the v1 path).
	ModeSystemd Mode = "systemd"
	// ModePod runs mount-s3 in a Mountpoint Pod (the v2 path).
	ModePod Mode = "pod"
	// ModeLegacy is never a node's mode: it labels mounts the Scality driver 1.x made, which
	// this driver adopts and counts apart (Router.Counts) until the last one is gone.
	ModeLegacy Mode = "legacy"
)

// DefaultMode is the cluster default mount mode when none is configured: the one place the
// node plugin's and the controller's --default-mounter take it from (and the chart's
// mounter.defaultMode, docs/configuration.md). systemd mode needs nothing but the node.
const DefaultMode = ModeSystemd

// LabelMounter is the Node label that chooses a node's mode, overriding the cluster default.
const LabelMounter = version.DriverName + "/mounter"

// ParseMode parses "systemd" or "pod".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeSystemd, ModePod:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mount mode %q is not one of %s, %s", s, ModeSystemd, ModePod)
}

// ResolveMode returns a node's effective mode: its LabelMounter label when set, else def. An
// invalid label value yields def together with an error describing the label, for the caller to
// report (event, log). The node plugin and the controller both call this, so they always agree.
func ResolveMode(labels map[string]string, def Mode) (Mode, error) {
	v, ok := labels[LabelMounter]
	if !ok {
		return def, nil
	}
	m, err := ParseMode(v)
	if err != nil {
		return def, fmt.Errorf("label %s: %w; using the default %s", LabelMounter, err, def)
	}
	return m, nil
}
