package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	dirMode, fileMode := os.FileMode(0o700), os.FileMode(0o600)
	if gid >= 0 {
		dirMode, fileMode = 0o750, 0o640
	}
	if err := os.MkdirAll(writeDir, dirMode); err != nil {
		return nil, fmt.Errorf("create credentials directory: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(writeDir, 0, gid); err != nil {
			return nil, fmt.Errorf("chown credentials directory: %w", err)
		}
		if err := os.Chmod(writeDir, dirMode); err != nil {
			return nil, fmt.Errorf("chmod credentials directory: %w", err)
		}
	}
	config := fmt.Sprintf("[profile %s]\n", ProfileName)
	creds := fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", ProfileName, c.AccessKeyID, c.SecretAccessKey)
	if c.SessionToken != "" {
		creds += fmt.Sprintf("aws_session_token = %s\n", c.SessionToken)
	}
	if err := writeAtomic(filepath.Join(writeDir, ConfigFileName), config, fileMode, gid); err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(writeDir, CredentialsFileName), creds, fileMode, gid); err != nil {
		return nil, err
	}
	return ProfileEnv(envDir), nil
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

// writeAtomic writes data to path via a temporary file (mode, group gid unless -1) in the same
// directory and a rename.
// It does not fsync: after a node crash every mount is gone and kubelet's republish rewrites
// the files, so durability would only add latency (and fsync stalls) to every publish.
func writeAtomic(path, data string, mode os.FileMode, gid int) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if gid >= 0 {
		if err = f.Chown(0, gid); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if _, err = f.WriteString(data); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
