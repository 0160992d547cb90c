// Command scality-fuse-helper makes the FUSE mount of a systemd-mode mount unit and hands its
// connection to the unit's mount-s3, which then needs no capability: systemd runs it as the
// unit's ExecStartPre with full privileges ("+"), it mounts FUSE at the staging directory
// (private, so the unit's binds of it do not join a peer group) and puts the descriptor in the
// unit's file descriptor store, from where systemd passes it to mount-s3 as fd 3 ("/dev/fd/3").
// install-mp copies it to the host next to mount-s3.
//
//	scality-fuse-helper mount [--in-manager-namespace] [--read-only] [--allow-other] <staging directory>
//
// Once mount-s3 serves that mount, the unit's ExecStartPost (also "+") binds it onto the
// workload's target twice, each bind read-only for a read-only volume: one process instead of
// two or four mount(8) commands, so systemd, which reads the node's whole mount table after each
// command that changed it, reads it once:
//
//	scality-fuse-helper bind [--in-manager-namespace] [--read-only] <staging directory> <target>
//
// A unit with a mount namespace of its own (the node plugin's --mount-s3-protect-system) runs
// these commands in that namespace; --in-manager-namespace makes them enter the namespace of
// the manager that started them first, so that the mounts land where the host sees them. Such a
// unit unmounts what a failed start left at its staging directory the same way (once per
// mount there):
//
//	scality-fuse-helper umount --in-manager-namespace <staging directory>
//
// It also makes sure the system user mount-s3 runs as exists (the node plugin's
// --mount-s3-user), run once per node plugin start:
//
//	scality-fuse-helper ensure-user --ids-file <file> <name>
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// fdName is the name the descriptor is stored under (LISTEN_FDNAMES for mount-s3).
const fdName = "fuse"

const usage = `usage: scality-fuse-helper mount [--in-manager-namespace] [--read-only] [--allow-other] <staging directory>
       scality-fuse-helper bind [--in-manager-namespace] [--read-only] <staging directory> <target>
       scality-fuse-helper umount --in-manager-namespace <staging directory>
       scality-fuse-helper ensure-user --ids-file <file> <name>`

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Printf("scality-fuse-helper %s\n", version.Version)
		return
	}
	if len(os.Args) < 2 {
		fail(2, usage)
	}
	cmd, args := os.Args[1], os.Args[2:]
	if cmd == "ensure-user" {
		if err := ensureUser(args); err != nil {
			fail(1, fmt.Sprintf("scality-fuse-helper ensure-user: %v", err))
		}
		return
	}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	inManager := fs.Bool("in-manager-namespace", false, "enter the mount namespace of the systemd manager that runs this command before mounting (a unit with a mount namespace of its own)")
	var readOnly, allowOther *bool
	var timeout *time.Duration
	want, what := 1, "one staging directory expected"
	switch cmd {
	case "mount":
		readOnly = fs.Bool("read-only", false, "mount read-only")
		allowOther = fs.Bool("allow-other", false, "let users other than root in (mount-s3's --allow-other or --allow-root)")
		timeout = fs.Duration("timeout", 10*time.Second, "how long to wait for systemd to take the descriptor")
	case "bind":
		readOnly = fs.Bool("read-only", false, "make each bind read-only")
		want, what = 2, "a staging directory and a target expected"
	case "umount":
	default:
		fail(2, usage)
	}
	_ = fs.Parse(args)
	if fs.NArg() != want {
		fail(2, fmt.Sprintf("scality-fuse-helper %s: %s\n%s", cmd, what, usage))
	}
	if cmd == "umount" && !*inManager {
		// Without a namespace of the unit's own, the unit runs umount(8) itself.
		fail(2, "scality-fuse-helper umount: only with --in-manager-namespace")
	}
	err := func() error {
		if *inManager {
			if err := enterManagerNamespace(); err != nil {
				return err
			}
		}
		switch cmd {
		case "mount":
			return run(fs.Arg(0), *readOnly, *allowOther, *timeout)
		case "bind":
			return bindTwice(fs.Arg(0), fs.Arg(1), *readOnly)
		default:
			return unmountStale(fs.Arg(0))
		}
	}()
	if err != nil {
		fail(1, fmt.Sprintf("scality-fuse-helper %s: %v", cmd, err))
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}
