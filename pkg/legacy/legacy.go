// Package legacy knows what the Scality S3 CSI driver 1.x (same driver name, systemd mounts
// only) leaves on a node, so that this driver can adopt those mounts after an in-place upgrade:
// each mount is a transient unit mount-s3-<mountpointVersion>-<uuid>.service running mount-s3
// directly on the kubelet target path, and, for volumes using the driver's credentials, an AWS
// profile pair in the plugin directory named after the workload pod and the volume:
// <pod>-<volume>-s3-csi-config and <pod>-<volume>-s3-csi-credentials (profile
// <pod>-<volume>-s3-csi), where "/" in either name is written "~".
package legacy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/s3csi/s3-csi-driver/pkg/confined"
	"github.com/s3csi/s3-csi-driver/pkg/credentials"
)

// unitName matches 1.x mount units: mount-s3-<version>-<uuid>.service. This driver's own units
// (mount-s3-<16 hex>.service, mount-s3-umount-<16 hex>.service) never match: they have no
// version and no UUID.
var unitName = regexp.MustCompile(`^mount-s3-[0-9][0-9A-Za-z.+~_]*-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.service$`)

// UnitPattern lists the candidates for IsUnit (a systemd unit name glob).
const UnitPattern = "mount-s3-*.service"

// IsUnit reports whether name is a mount unit of the 1.x driver.
func IsUnit(name string) bool { return unitName.MatchString(name) }

// profileSuffix ends the 1.x profile name and both file names.
const profileSuffix = "s3-csi"

// Files are the profile files of one 1.x mount, as names inside the plugin directory.
type Files struct {
	// Profile is the AWS profile name (AWS_PROFILE of the unit).
	Profile string
	// Config and Credentials are the file names (no directory).
	Config, Credentials string
}

// FilesFor returns the profile files 1.x wrote for volumeID published to workload pod podUID.
func FilesFor(podUID, volumeID string) Files {
	prefix := escape(podUID) + "-" + escape(volumeID) + "-" + profileSuffix
	return Files{Profile: prefix, Config: prefix + "-config", Credentials: prefix + "-credentials"}
}

// FilesFromEnv returns the profile files a 1.x unit's environment points at, when both are
// directly in pluginDir and named as 1.x names them; ok is false otherwise (secret-mode units
// carry keys in their environment instead, and no path outside the plugin directory is ever
// taken from a unit).
func FilesFromEnv(pluginDir string, env []string) (Files, bool) {
	var f Files
	var cfg, creds string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "AWS_PROFILE":
			f.Profile = v
		case "AWS_CONFIG_FILE":
			cfg = v
		case "AWS_SHARED_CREDENTIALS_FILE":
			creds = v
		}
	}
	inDir := func(p string) (string, bool) {
		return filepath.Base(p), filepath.Clean(filepath.Dir(p)) == filepath.Clean(pluginDir) && filepath.IsAbs(p)
	}
	var okCfg, okCreds bool
	f.Config, okCfg = inDir(cfg)
	f.Credentials, okCreds = inDir(creds)
	if !okCfg || !okCreds || !strings.HasSuffix(f.Profile, "-"+profileSuffix) ||
		f.Config != f.Profile+"-config" || f.Credentials != f.Profile+"-credentials" {
		return Files{}, false
	}
	return f, true
}

// Refresh rewrites f in pluginDir with c, as 1.x writes them (mode 0640), when both files
// exist: a running 1.x mount-s3 rereads them when its credentials expire. It reports whether
// it wrote them. Files are replaced by a rename inside the directory, never followed.
func Refresh(pluginDir string, f Files, c credentials.Credentials) (bool, error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	d, err := confined.Open(pluginDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer d.Close()
	for _, name := range []string{f.Config, f.Credentials} {
		if _, _, err := d.ReadFile(name, 0); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, fmt.Errorf("1.x credential file %s: %w", name, err)
		}
	}
	config := fmt.Sprintf("[profile %s]\n", f.Profile)
	creds := fmt.Sprintf("[%s]\naws_access_key_id=%s\naws_secret_access_key=%s\n", f.Profile, c.AccessKeyID, c.SecretAccessKey)
	if c.SessionToken != "" {
		creds += fmt.Sprintf("aws_session_token=%s\n", c.SessionToken)
	}
	if err := d.WriteFile(f.Config, []byte(config), 0o640, -1); err != nil {
		return false, err
	}
	if err := d.WriteFile(f.Credentials, []byte(creds), 0o640, -1); err != nil {
		return false, err
	}
	return true, nil
}

// Remove deletes f from pluginDir; missing files are fine.
func Remove(pluginDir string, f Files) error {
	d, err := confined.Open(pluginDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return errors.Join(d.Remove(f.Config), d.Remove(f.Credentials))
}

// escape is kubelet's EscapeQualifiedName, which 1.x applies to both names.
func escape(s string) string { return strings.ReplaceAll(s, "/", "~") }

// RemoveForPod deletes the profile files of workload pod podUID from pluginDir when the pod has
// exactly one set (a node plugin without systemd cannot read the unit that names them, and does
// not know which volume a target was; with several sets it cannot tell them apart and leaves
// them, returning false).
func RemoveForPod(pluginDir, podUID string) (bool, error) {
	d, err := confined.Open(pluginDir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	entries, err := os.ReadDir(pluginDir)
	if err != nil {
		return false, err
	}
	prefix, suffix := escape(podUID)+"-", "-"+profileSuffix+"-credentials"
	var sets []Files
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix) {
			profile := strings.TrimSuffix(name, "-credentials")
			sets = append(sets, Files{Profile: profile, Config: profile + "-config", Credentials: name})
		}
	}
	if len(sets) != 1 {
		return false, nil
	}
	return true, errors.Join(d.Remove(sets[0].Config), d.Remove(sets[0].Credentials))
}
