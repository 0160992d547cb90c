package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/s3csi/s3-csi-driver/pkg/confined"
)

// ProfileName is the AWS profile the driver writes and mount-s3 selects with AWS_PROFILE.
const ProfileName = "s3-csi"

// Profile file names inside the directory given to WriteProfile.
const (
	ConfigFileName      = "config"
	CredentialsFileName = "credentials"
)

// WriteProfile writes c as an AWS profile pair (config + credentials files, each 0600) into
// writeDir, creating writeDir (0700) if needed. Each file is written to a temporary name and
// renamed into place, so a running mount-s3 never reads a half-written file; rewriting the same
// directory is how credentials are refreshed. envDir is where mount-s3 sees writeDir (equal to
// writeDir when both run in the same filesystem view). The returned environment variables
// select the profile; they hold paths only, never secrets. On error nothing new is left behind.
func WriteProfile(writeDir, envDir string, c Credentials) ([]string, error) {
	return writeProfile(writeDir, envDir, c, -1)
}

// WriteProfileForGroup is WriteProfile for a reader that is not root: the directory is 0750 and
// the files 0640, both owned by root and group gid (the non-root Mountpoint Pod reads them
// through its group).
func WriteProfileForGroup(writeDir, envDir string, c Credentials, gid int) ([]string, error) {
	return writeProfile(writeDir, envDir, c, gid)
}

func writeProfile(writeDir, envDir string, c Credentials, gid int) ([]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	parent, err := confined.Open(filepath.Dir(writeDir))
	if err != nil {
		return nil, fmt.Errorf("open the credentials directory's parent: %w", err)
	}
	defer parent.Close()
	return WriteProfileIn(parent, filepath.Base(writeDir), envDir, c, gid)
}

// WriteProfileIn is WriteProfile (gid < 0) or WriteProfileForGroup (gid >= 0) for the
// subdirectory sub of a directory someone else can write (a Mountpoint Pod's comm directory):
// every access stays inside parent, a link at sub or at a file name is never followed, and the
// files are replaced by a rename (see package confined).
func WriteProfileIn(parent *confined.Dir, sub, envDir string, c Credentials, gid int) ([]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dir, fileMode, err := openSub(parent, sub, gid)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	config := fmt.Sprintf("[profile %s]\n", ProfileName)
	creds := fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", ProfileName, c.AccessKeyID, c.SecretAccessKey)
	if c.SessionToken != "" {
		creds += fmt.Sprintf("aws_session_token = %s\n", c.SessionToken)
	}
	// No fsync: after a node crash every mount is gone and kubelet's republish rewrites the
	// files, so durability would only add latency (and fsync stalls) to every publish.
	if err := dir.WriteFile(ConfigFileName, []byte(config), fileMode, gid); err != nil {
		return nil, err
	}
	if err := dir.WriteFile(CredentialsFileName, []byte(creds), fileMode, gid); err != nil {
		return nil, err
	}
	return ProfileEnv(envDir), nil
}

// WriteFile writes data as name into the credentials directory dir (created when missing;
// its parent must exist), the way WriteProfile writes the profile files: root only (0700,
// 0600) when gid < 0, else shared with group gid (0750, 0640); no link is followed, the file is
// replaced by a rename. It returns the file's path.
func WriteFile(dir, name string, data []byte, gid int) (string, error) {
	parent, err := confined.Open(filepath.Dir(dir))
	if err != nil {
		return "", fmt.Errorf("open the credentials directory's parent: %w", err)
	}
	defer parent.Close()
	sub, fileMode, err := openSub(parent, filepath.Base(dir), gid)
	if err != nil {
		return "", err
	}
	defer sub.Close()
	if err := sub.WriteFile(name, data, fileMode, gid); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// openSub opens (creating it when missing) the credentials directory sub of parent with the
// modes for a reader of group gid (root only when gid < 0) and returns the mode for its files.
func openSub(parent *confined.Dir, sub string, gid int) (*confined.Dir, os.FileMode, error) {
	dirMode, fileMode := os.FileMode(0o700), os.FileMode(0o600)
	if gid >= 0 {
		dirMode, fileMode = 0o750, 0o640
	}
	dir, err := parent.Sub(sub, dirMode, gid)
	if err != nil {
		return nil, 0, fmt.Errorf("create credentials directory: %w", err)
	}
	return dir, fileMode, nil
}

// ProfileEnv returns the environment that selects the profile files in envDir.
func ProfileEnv(envDir string) []string {
	return []string{
		"AWS_PROFILE=" + ProfileName,
		"AWS_CONFIG_FILE=" + filepath.Join(envDir, ConfigFileName),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(envDir, CredentialsFileName),
	}
}

// RemoveProfile deletes the profile files from dir. Missing files are not an error.
func RemoveProfile(dir string) error {
	var errs []error
	for _, name := range []string{ConfigFileName, CredentialsFileName} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
