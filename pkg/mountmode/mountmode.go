// Package mountmode is how a node mounts volumes (systemd mode or pod mode) and how its mode is
// resolved from its labels. The node plugin (which mounts in that mode) and the controller (which
// makes Mountpoint Pods only for pod-mode nodes) both resolve modes here, so they always agree.
// It is a leaf: it imports nothing of the driver but its name.
package mountmode

import (
	"fmt"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// Mode is how a node mounts volumes.
type Mode string

const (
	// Systemd runs mount-s3 as a transient systemd unit on the host (the v1 path).
	Systemd Mode = "systemd"
	// Pod runs mount-s3 in a Mountpoint Pod (the v2 path).
	Pod Mode = "pod"
	// Legacy is never a node's mode: it labels mounts the Scality driver 1.x made, which the
	// node plugin adopts and counts apart until the last one is gone.
	Legacy Mode = "legacy"
)

// Default is the cluster default mount mode when none is configured: the one place the node
// plugin's and the controller's --default-mounter take it from (and the chart's
// mounter.defaultMode, docs/configuration.md). systemd mode needs nothing but the node.
const Default = Systemd

// Label is the Node label that chooses a node's mode, overriding the cluster default.
const Label = version.DriverName + "/mounter"

// Parse parses "systemd" or "pod".
func Parse(s string) (Mode, error) {
	switch Mode(s) {
	case Systemd, Pod:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mount mode %q is not one of %s, %s", s, Systemd, Pod)
}

// Resolve returns a node's effective mode: its Label label when set, else def. An invalid label
// value yields def together with an error describing the label, for the caller to report
// (event, log).
func Resolve(labels map[string]string, def Mode) (Mode, error) {
	v, ok := labels[Label]
	if !ok {
		return def, nil
	}
	m, err := Parse(v)
	if err != nil {
		return def, fmt.Errorf("label %s: %w; using the default %s", Label, err, def)
	}
	return m, nil
}
