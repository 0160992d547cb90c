// Command scality-fuse-helper makes the FUSE mount of a systemd-mode mount unit and hands its
// connection to the unit's mount-s3, which then needs no capability: systemd runs it as the
// unit's ExecStartPre with full privileges ("+"), it mounts FUSE at the staging directory
// (private, so the unit's binds of it do not join a peer group) and puts the descriptor in the
// unit's file descriptor store, from where systemd passes it to mount-s3 as fd 3 ("/dev/fd/3").
// install-mp copies it to the host next to mount-s3.
//
//	scality-fuse-helper mount [--read-only] [--allow-other] <staging directory>
//
// Once mount-s3 serves that mount, the unit's ExecStartPost (also "+") binds it onto the
// workload's target twice, each bind read-only for a read-only volume: one process instead of
// two or four mount(8) commands, so systemd, which reads the node's whole mount table after each
// command that changed it, reads it once:
//
//	scality-fuse-helper bind [--read-only] <staging directory> <target>
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

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "ensure-user" {
		if err := ensureUser(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "scality-fuse-helper ensure-user: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "bind" {
		fs := flag.NewFlagSet("bind", flag.ExitOnError)
		readOnly := fs.Bool("read-only", false, "make each bind read-only")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 2 {
			fmt.Fprintln(os.Stderr, "scality-fuse-helper bind: a staging directory and a target expected")
			os.Exit(2)
		}
		if err := bindTwice(fs.Arg(0), fs.Arg(1), *readOnly); err != nil {
			fmt.Fprintf(os.Stderr, "scality-fuse-helper bind: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "mount" {
		if len(os.Args) == 2 && os.Args[1] == "--version" {
			fmt.Printf("scality-fuse-helper %s\n", version.Version)
			return
		}
		fmt.Fprintln(os.Stderr, "usage: scality-fuse-helper mount [--read-only] [--allow-other] <staging directory>\n       scality-fuse-helper bind [--read-only] <staging directory> <target>\n       scality-fuse-helper ensure-user --ids-file <file> <name>")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("mount", flag.ExitOnError)
	readOnly := fs.Bool("read-only", false, "mount read-only")
	allowOther := fs.Bool("allow-other", false, "let users other than root in (mount-s3's --allow-other or --allow-root)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for systemd to take the descriptor")
	_ = fs.Parse(os.Args[2:])
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "scality-fuse-helper mount: one staging directory expected")
		os.Exit(2)
	}
	if err := run(fs.Arg(0), *readOnly, *allowOther, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "scality-fuse-helper: %v\n", err)
		os.Exit(1)
	}
}
