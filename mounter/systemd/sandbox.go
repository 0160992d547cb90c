package systemd

import (
	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// capSysAdmin is CAP_SYS_ADMIN's number (linux/capability.h; the package also builds on other
// systems for the controller).
const capSysAdmin = 21

// Sandbox returns the confinement every unit of the driver gets (mount-s3 with its binds, and
// the unmount units). Each property bounds what a process of the unit can do without giving
// it a mount namespace of its own:
//   - CapabilityBoundingSet=CAP_SYS_ADMIN: mount(2) of the FUSE filesystem and the binds need
//     it (a mount unit with the descriptor hand-over empties it: its mount-s3 mounts nothing,
//     and its mount commands run with full privileges, handover.go); every other capability of
//     root goes (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_SYS_MODULE,
//     CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_SYS_RAWIO, CAP_SETUID, …), so a compromised mount-s3
//     cannot write a file another user owns, load a module or trace a process.
//   - NoNewPrivileges: no setuid or file-capability binary raises it again.
//   - RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK: S3 over IP, name resolution
//     (glibc's getaddrinfo asks netlink for the node's addresses); no raw packet sockets.
//   - RestrictNamespaces: no new namespace (no user namespace to regain capabilities in).
//   - LockPersonality, RestrictRealtime, RestrictSUIDSGID (no setuid/setgid file created),
//     UMask=0077.
//   - SystemCallFilter: a deny list (deniedSyscalls) of calls the container runtime's default
//     seccomp profile also refuses to a container without capabilities, where real mount-s3
//     runs in pod mode, failing with EPERM as they do there (SystemCallErrorNumber); among them
//     bpf and perf_event_open, which CAP_SYS_ADMIN would otherwise allow: kernel programs and
//     counters that read any process's memory. SystemCallArchitectures=native: no 32-bit
//     system call ABI.
//
// Real mount-s3 already runs under tighter rules in pod mode (no capability at all, no
// privilege escalation, the container runtime's seccomp profile); here it keeps the one
// capability its own mount(2) needs. Options that give the unit a mount namespace
// (ProtectSystem, ProtectHome, PrivateTmp, ReadWritePaths, PrivateDevices, …) are left out:
// the FUSE mount mount-s3 makes would stay in that namespace, invisible to the host and to the
// workloads (systemd cannot propagate a namespace's mounts back to the host once it set it up),
// see docs/security.md.
func Sandbox() []sd.Property {
	return []sd.Property{
		{Name: "CapabilityBoundingSet", Value: dbus.MakeVariant(uint64(1) << capSysAdmin)},
		{Name: "NoNewPrivileges", Value: dbus.MakeVariant(true)},
		{Name: "RestrictAddressFamilies", Value: dbus.MakeVariant(addressFamilies{Allow: true, Families: []string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}})},
		// The namespace types a unit may create: none.
		{Name: "RestrictNamespaces", Value: dbus.MakeVariant(uint64(0))},
		{Name: "LockPersonality", Value: dbus.MakeVariant(true)},
		{Name: "RestrictRealtime", Value: dbus.MakeVariant(true)},
		{Name: "RestrictSUIDSGID", Value: dbus.MakeVariant(true)},
		{Name: "UMask", Value: dbus.MakeVariant(uint32(0o077))},
		{Name: "SystemCallFilter", Value: dbus.MakeVariant(syscallFilter{Allow: false, Calls: deniedSyscalls})},
		{Name: "SystemCallErrorNumber", Value: dbus.MakeVariant(int32(1))}, // EPERM
		{Name: "SystemCallArchitectures", Value: dbus.MakeVariant([]string{"native"})},
	}
}

// deniedSyscalls are the system calls no process of the driver's units may make. Each is
// refused by the default seccomp profile of the container runtimes (Docker's and containerd's,
// for a container without the capability named) under which real mount-s3 runs in pod mode, so
// refusing them here takes nothing mount-s3 uses away; systemd's groups are listed with the
// calls they hold:
//   - @keyring (add_key, keyctl, request_key), @swap (swapon, swapoff), @reboot (reboot,
//     kexec_load, kexec_file_load), @module (init_module, finit_module, delete_module),
//     @raw-io (iopl, ioperm, pciconfig_*), @obsolete (sysfs, ustat, uselib, ...);
//   - bpf and perf_event_open (CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON), userfaultfd, pidfd_getfd,
//     kcmp and lookup_dcookie (CAP_SYS_PTRACE, CAP_SYS_ADMIN), pivot_root, quotactl, acct,
//     syslog, open_by_handle_at (CAP_DAC_READ_SEARCH), and setting the clock (CAP_SYS_TIME).
var deniedSyscalls = []string{
	"@keyring", "@swap", "@reboot", "@module", "@raw-io", "@obsolete",
	"bpf", "perf_event_open", "userfaultfd", "pidfd_getfd", "kcmp", "lookup_dcookie",
	"pivot_root", "quotactl", "acct", "syslog", "open_by_handle_at",
	"clock_settime", "clock_adjtime", "settimeofday",
}

// syscallFilter is systemd's SystemCallFilter property (D-Bus (bas)): whether the list is an
// allow list (false: a deny list), and the calls or @groups.
type syscallFilter struct {
	Allow bool
	Calls []string
}

// addressFamilies is systemd's RestrictAddressFamilies property (D-Bus (bas)): whether the list
// is an allow list, and the families.
type addressFamilies struct {
	Allow    bool
	Families []string
}
