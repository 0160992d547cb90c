package systemd

import (
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// The file system protection of mount units (Config.ProtectSystem, ADR 0010): with the
// descriptor hand-over, mount-s3 needs no mount of its own, so its unit can get a mount namespace
// in which the node's file systems are read-only but for its cache, /tmp is its own and /dev
// holds the pseudo devices only. systemd runs the unit's "+" commands in that namespace too, so
// scality-fuse-helper enters the manager's (--in-manager-namespace) before it mounts FUSE, binds
// it onto the target or unmounts a stale mount: those mounts must be where kubelet and the
// workloads see them. The cost: the namespace is a copy of the node's whole mount table, held in
// unreclaimable kernel memory for as long as the unit runs (about 420 bytes per mount-table
// entry per unit, measured on systemd 252), and every mount or unmount on the node propagates
// into every such unit, so it grows with the square of the mounts on the node.

// HiddenByProtection are the directories a unit with protectProperties does not see as the node
// has them (PrivateTmp, ProtectHome): what mount-s3 or scality-fuse-helper reads, runs or writes
// must not be below one.
var HiddenByProtection = []string{"/tmp", "/var/tmp", "/home", "/root", "/run/user"}

// protectProperties are the properties of a unit's mount namespace; writable are the paths
// mount-s3 writes (its cache), each of which must exist when the unit starts.
//   - ProtectSystem=strict: the whole file system hierarchy read-only (not only /usr and /etc),
//     but for /dev, /proc and /sys, which the options below cover, and ReadWritePaths.
//   - ProtectHome: /home, /root and /run/user empty and inaccessible.
//   - PrivateTmp: /tmp and /var/tmp of the unit's own, removed when it stops.
//   - PrivateDevices: /dev with null, zero, full, random, urandom, tty and the /dev/log link to
//     journald only (no disk, no /dev/fuse: mount-s3 serves a descriptor).
//   - DeviceAllow=/dev/fuse rw: PrivateDevices also closes the unit's device cgroup (cgroup v2:
//     a BPF device filter of its cgroup), which binds every process of the unit, "+" commands
//     included: without it scality-fuse-helper's open of the manager's /dev/fuse fails with EPERM
//     (seen on PID 1 of the VM rig; a user manager on cgroup v1 has no device controller). mount-s3
//     still cannot open it: its /dev has no such node and it has no capability to make one.
//   - ReadOnlyPaths=/run: on systemd 252, ProtectKernelTunables or ProtectControlGroups leave
//     /run and /run/lock writable under ProtectSystem=strict (seen on PID 1 of the VM rig, where
//     the credentials directory is): both imply MountAPIVFS, whose /run entry keeps /run out of
//     the read-only remount of / (ADR 0010, read in systemd-stable@v252.31); named again, they
//     are read-only. The sockets mount-s3 and
//     the helper send to there (journald's /dev/log, the manager's notify socket) still take
//     messages: a read-only mount refuses writes to files, not to sockets.
//   - ProtectKernelTunables, ProtectKernelModules, ProtectKernelLogs, ProtectControlGroups,
//     ProtectClock, ProtectHostname: /proc/sys, /sys and the cgroup tree read-only, no module
//     loading, no kernel log, no clock or host name changes.
func protectProperties(writable []string) []sd.Property {
	props := []sd.Property{
		{Name: "ProtectSystem", Value: dbus.MakeVariant("strict")},
		{Name: "ProtectHome", Value: dbus.MakeVariant("yes")},
		{Name: "PrivateTmp", Value: dbus.MakeVariant(true)},
		{Name: "PrivateDevices", Value: dbus.MakeVariant(true)},
		{Name: "DeviceAllow", Value: dbus.MakeVariant([]deviceAllow{{Path: "/dev/fuse", Access: "rw"}})},
		{Name: "ReadOnlyPaths", Value: dbus.MakeVariant([]string{"/run"})},
		{Name: "ProtectKernelTunables", Value: dbus.MakeVariant(true)},
		{Name: "ProtectKernelModules", Value: dbus.MakeVariant(true)},
		{Name: "ProtectKernelLogs", Value: dbus.MakeVariant(true)},
		{Name: "ProtectControlGroups", Value: dbus.MakeVariant(true)},
		{Name: "ProtectClock", Value: dbus.MakeVariant(true)},
		{Name: "ProtectHostname", Value: dbus.MakeVariant(true)},
	}
	if len(writable) > 0 {
		props = append(props, sd.Property{Name: "ReadWritePaths", Value: dbus.MakeVariant(writable)})
	}
	return props
}

// deviceAllow is one entry of systemd's DeviceAllow property (D-Bus a(ss)): a device node and
// the access allowed (r, w, m).
type deviceAllow struct {
	Path   string
	Access string
}

// writablePaths are the directories mount-s3 writes under args: its cache (the driver's own
// directory, "--cache=<dir>"; a PV cannot name one).
func writablePaths(args []string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--cache="); ok && strings.HasPrefix(v, "/") {
			out = append(out, v)
		}
	}
	return out
}

// inManager adds --in-manager-namespace to a scality-fuse-helper command (its first argument is
// the subcommand) when the unit has a mount namespace of its own.
func inManager(cmd []string, protect bool) []string {
	if !protect {
		return cmd
	}
	return append([]string{cmd[0], cmd[1], "--in-manager-namespace"}, cmd[2:]...)
}
