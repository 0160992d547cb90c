package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"

	"github.com/s3csi/s3-csi-driver/pkg/sysuser"
)

// sysusersPaths and useraddPaths are where the host's tools may be: systemd-sysusers (any
// systemd since 215) first, useradd where it is missing.
var (
	sysusersPaths = []string{"/usr/bin/systemd-sysusers", "/bin/systemd-sysusers", "/usr/sbin/systemd-sysusers"}
	useraddPaths  = []string{"/usr/sbin/useradd", "/sbin/useradd", "/usr/bin/useradd"}
	// noLoginShells are the shells a user made with useradd may get, the first on the host:
	// distributions without the /usr merge have nologin in /sbin only, minimal ones none.
	noLoginShells = []string{"/usr/sbin/nologin", "/sbin/nologin", "/usr/bin/false", "/bin/false"}
)

// ensureUser is "scality-fuse-helper ensure-user --ids-file <file> <name>": it makes sure the
// system user name (with a group of the same name) exists on the host, creating it with the
// host's own tool when it does not, and writes its ids to the file. The node plugin runs it as
// a oneshot unit with full privileges before it starts mount-s3 units as that user.
func ensureUser(args []string) error {
	fs := flag.NewFlagSet("ensure-user", flag.ContinueOnError)
	idsFile := fs.String("ids-file", "", "where to write \"<uid> <gid>\"")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *idsFile == "" {
		return errors.New("usage: scality-fuse-helper ensure-user --ids-file <file> <name>")
	}
	name := fs.Arg(0)
	if err := sysuser.ValidateName(name); err != nil {
		return fmt.Errorf("user name %w", err)
	}
	ids, err := lookup(name)
	if errors.As(err, new(user.UnknownUserError)) {
		if err := create(name); err != nil {
			return err
		}
		ids, err = lookup(name)
	}
	if err != nil {
		return err
	}
	return sysuser.WriteIDs(*idsFile, ids)
}

// lookup returns name's uid and primary gid; root's are refused.
func lookup(name string) (sysuser.IDs, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return sysuser.IDs{}, err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return sysuser.IDs{}, fmt.Errorf("user %s has ids %q/%q, not numbers", name, u.Uid, u.Gid)
	}
	if uid == 0 || gid == 0 {
		return sysuser.IDs{}, fmt.Errorf("user %s has uid %d and gid %d: a dedicated user must not be root or in root's group", name, uid, gid)
	}
	return sysuser.IDs{UID: uid, GID: gid}, nil
}

// create adds name as a system user with a group of its own, no home and no login shell.
func create(name string) error {
	if p := firstExisting(sysusersPaths); p != "" {
		line := fmt.Sprintf("u %s - %q", name, sysuser.Description)
		return runTool(exec.Command(p, "--inline", line)) //nolint:gosec // G204: a fixed tool, a validated name
	}
	if p := firstExisting(useraddPaths); p != "" {
		args := []string{"--system", "--user-group", "--no-create-home", "--home-dir", "/", "--comment", sysuser.Description}
		if sh := firstExisting(noLoginShells); sh != "" {
			args = append(args, "--shell", sh) // else useradd's default; the account has no password either way
		}
		return runTool(exec.Command(p, append(args, name)...)) //nolint:gosec // G204: a fixed tool, a validated name
	}
	return fmt.Errorf("user %s does not exist, and neither systemd-sysusers nor useradd is on the host to create it: create it (a system user with a group of the same name) or set --mount-s3-user= (Helm node.mountS3User: \"\") to run mount-s3 as root", name)
}

func firstExisting(paths []string) string {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

func runTool(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", cmd.Path, err, out)
	}
	return nil
}
