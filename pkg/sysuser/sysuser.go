// Package sysuser names and records the system user that systemd-mode mount-s3 runs as: the
// node plugin passes the name to scality-fuse-helper, which makes sure the user exists on the
// host and writes its ids to a file the node plugin reads (at most MaxIDsFile bytes, without
// following a link: package confined).
package sysuser

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Description is the account's comment (GECOS) field.
const Description = "S3 CSI driver mount-s3" // no colon: the passwd file's separator

// namePattern is what useradd and systemd-sysusers both accept as a portable system user name.
var namePattern = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}$`)

// ValidateName checks a user name given to --mount-s3-user (an empty name means root).
func ValidateName(name string) error {
	if name == "root" {
		return errors.New("is root, which is what an empty value means; name a dedicated system user such as s3csi-mount, or leave it empty to run mount-s3 as root")
	}
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%q is not a portable user name: use 1 to 31 of lowercase letters, digits, '_' and '-', starting with a letter or '_' (e.g. s3csi-mount)", name)
	}
	return nil
}

// IDs are a user's numeric user and primary group ids.
type IDs struct {
	UID, GID int
}

// MaxIDsFile bounds what a reader of an ids file reads.
const MaxIDsFile = 64

// WriteIDs writes ids to path atomically (a temporary file renamed into place), mode 0644.
func WriteIDs(path string, ids IDs) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", ids.UID, ids.GID)), 0o644); err != nil { //nolint:gosec // G306: ids are not secret
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// ParseIDs parses what WriteIDs wrote. Root's ids (0) are refused: the point of the user is not
// to be root.
func ParseIDs(b []byte) (IDs, error) {
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return IDs{}, fmt.Errorf("want \"<uid> <gid>\", got %q", b)
	}
	uid, err1 := strconv.Atoi(fields[0])
	gid, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 || uid > 1<<31-2 || gid > 1<<31-2 {
		return IDs{}, fmt.Errorf("want two positive ids, got %q", b)
	}
	return IDs{UID: uid, GID: gid}, nil
}
