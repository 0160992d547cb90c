// Package targetpath validates the target paths kubelet passes to NodePublishVolume and
// NodeUnpublishVolume, and extracts the workload pod UID and PV name from kubelet's layout
// <kubelet>/pods/<podUID>/volumes/kubernetes.io~csi/<pvName>/mount.
//
// Validation is purely lexical plus one symlink check; it never creates anything.
package targetpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// MaxLen is the longest accepted target path in bytes (Linux PATH_MAX).
const MaxLen = 4096

// ErrInvalid is wrapped by every validation error returned by Parse.
var ErrInvalid = errors.New("invalid target path")

// Path is a validated target path.
type Path struct {
	// Path is the target path itself, already clean and absolute.
	Path string
	// PodUID and PVName are set when the path follows kubelet's CSI layout; empty otherwise.
	PodUID string
	PVName string
}

// Parse validates target against the kubelet root directory kubeletDir. A valid target is a
// non-empty, valid UTF-8, absolute and clean path (no "..", no duplicate or trailing slashes,
// no control characters) of at most MaxLen bytes, strictly below <kubeletDir>/pods/. When the
// target's parent directory exists, its real path (symlinks resolved) must also be below the
// real <kubeletDir>/pods, so a symlink cannot redirect a mount elsewhere on the host.
// Errors wrap ErrInvalid and never include more than the offending path.
func Parse(kubeletDir, target string) (Path, error) {
	if target == "" {
		return Path{}, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if err := safetext.Check(target, MaxLen); err != nil {
		return Path{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !filepath.IsAbs(target) {
		return Path{}, fmt.Errorf("%w: %q is not absolute", ErrInvalid, target)
	}
	if filepath.Clean(target) != target {
		return Path{}, fmt.Errorf("%w: %q is not a clean path (\"..\", \".\", or repeated/trailing slashes)", ErrInvalid, target)
	}
	podsDir := filepath.Join(kubeletDir, "pods")
	rel, ok := strings.CutPrefix(target, podsDir+"/")
	if !ok || rel == "" {
		return Path{}, fmt.Errorf("%w: %q is not below %s", ErrInvalid, target, podsDir)
	}
	if err := checkRealParent(podsDir, target); err != nil {
		return Path{}, err
	}
	p := Path{Path: target}
	// <podUID>/volumes/kubernetes.io~csi/<pvName>/mount
	if parts := strings.Split(rel, "/"); len(parts) == 5 && parts[1] == "volumes" && parts[2] == "kubernetes.io~csi" && parts[4] == "mount" {
		p.PodUID, p.PVName = parts[0], parts[3]
	}
	return p, nil
}

// checkRealParent resolves symlinks in target's parent (when it exists) and requires the result
// to stay below the real pods directory.
func checkRealParent(podsDir, target string) error {
	parent, err := filepath.EvalSymlinks(filepath.Dir(target))
	if errors.Is(err, os.ErrNotExist) {
		return nil // kubelet creates the parent; a missing parent fails later at mkdir time
	}
	if err != nil {
		return fmt.Errorf("%w: resolving %q: %v", ErrInvalid, filepath.Dir(target), err)
	}
	realPods, err := filepath.EvalSymlinks(podsDir)
	if err != nil {
		return fmt.Errorf("%w: resolving %q: %v", ErrInvalid, podsDir, err)
	}
	if parent != realPods && !strings.HasPrefix(parent, realPods+"/") {
		return fmt.Errorf("%w: %q resolves outside %s", ErrInvalid, target, podsDir)
	}
	return nil
}
