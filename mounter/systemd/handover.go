package systemd

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"
)

// The descriptor hand-over (ADR 0010): with Config.FuseHelperPath set and a systemd of
// minHandoverVersion or later, a mount unit no longer lets mount-s3 mount FUSE itself. Its
// ExecStartPre, run with full privileges ("+"), is scality-fuse-helper: it mounts FUSE at the
// staging directory and puts the connection's descriptor in the unit's descriptor store, from
// where systemd gives it to mount-s3 as fd 3; mount-s3 serves "/dev/fd/3" with no capability at
// all (CapabilityBoundingSet empty). The unit's other mount commands (the staging directory's
// stale mounts, the binds onto the target) run with full privileges too.

// minHandoverVersion is the first systemd with what the hand-over needs: "+" commands of
// transient units (ExecStartPreEx, 243) and the notification barrier the helper waits on (246).
const minHandoverVersion = 246

// handoverFD is the descriptor number systemd gives mount-s3 (SD_LISTEN_FDS_START).
const handoverFD = 3

// handoverState caches whether the manager supports the hand-over.
type handoverState struct {
	mu      sync.Mutex
	known   bool
	ok      bool
	version string
}

// useHandover reports whether new mount units use the hand-over: a helper is configured and the
// manager is recent enough. The manager's version is read once.
func (m *Mounter) useHandover(ctx context.Context) bool {
	if m.cfg.FuseHelperPath == "" {
		return false
	}
	h := &m.handover
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known {
		return h.ok
	}
	var version string
	err := m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		type answer struct {
			v   string
			err error
		}
		ch := make(chan answer, 1)
		go func() { v, err := c.GetManagerProperty("Version"); ch <- answer{v, err} }()
		select {
		case a := <-ch:
			version = a.v
			return a.err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		klog.V(2).InfoS("Could not read systemd's version; mounting without the descriptor hand-over this time", "err", err)
		return false
	}
	h.known, h.version = true, strings.Trim(version, `"`)
	h.ok = majorVersion(h.version) >= minHandoverVersion
	if h.ok {
		klog.InfoS("mount-s3 units get their FUSE connection from scality-fuse-helper and run without capabilities", "systemd", h.version, "helper", m.cfg.FuseHelperPath, "protectSystem", m.cfg.ProtectSystem)
	} else {
		klog.InfoS("systemd is too old for the descriptor hand-over; mount-s3 mounts FUSE itself, holding CAP_SYS_ADMIN", "systemd", h.version, "needs", minHandoverVersion)
		if m.cfg.ProtectSystem {
			klog.InfoS("--mount-s3-protect-system needs the descriptor hand-over: mount units run without a mount namespace of their own", "systemd", h.version)
		}
	}
	return h.ok
}

// majorVersion parses systemd's version ("252.38-1~deb12u1", "239") to its first number; 0
// when it has none.
func majorVersion(v string) int {
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	n, err := strconv.Atoi(v[:end])
	if err != nil {
		return 0
	}
	return n
}

// handoverArgs are mount-s3's rendered options (mountargs' List: "--key" or "--key=value")
// with a handed-over connection: --read-only and --auto-unmount belong to the mount(2) call,
// which the helper makes, and mount-s3 refuses them with "/dev/fd/N" (CONFORMANCE.md M7). A
// read-only volume gets a read-only FUSE mount instead.
func handoverArgs(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--read-only" || a == "--auto-unmount" })
}

// helperCommand is the ExecStartPre command that mounts FUSE at staging for args' options.
func (m *Mounter) helperCommand(args []string, staging string) []string {
	cmd := []string{m.cfg.FuseHelperPath, "mount"}
	if slices.Contains(args, "--read-only") {
		cmd = append(cmd, "--read-only")
	}
	if slices.Contains(args, "--allow-other") || slices.Contains(args, "--allow-root") {
		cmd = append(cmd, "--allow-other")
	}
	return append(cmd, staging)
}

// helperBindCommand is the ExecStartPost command that binds the mount at staging onto target
// twice (read-only binds for a read-only volume).
func (m *Mounter) helperBindCommand(staging, target string, readOnly bool) []string {
	cmd := []string{m.cfg.FuseHelperPath, "bind"}
	if readOnly {
		cmd = append(cmd, "--read-only")
	}
	return append(cmd, staging, target)
}

// execCommandEx is one entry of systemd's ExecStartPreEx/ExecStartPostEx properties (D-Bus
// a(sasas)): the program, its argv and its flags ("privileged": the "+" prefix).
type execCommandEx struct {
	Path  string
	Args  []string
	Flags []string
}

// privilegedExecProperty is ExecProperty for commands systemd runs with full privileges
// ("+"): as root, without the unit's capability bounding set and sandbox.
func privilegedExecProperty(name string, argvs ...[]string) sd.Property {
	cmds := make([]execCommandEx, 0, len(argvs))
	for _, a := range argvs {
		cmds = append(cmds, execCommandEx{Path: a[0], Args: a, Flags: []string{"privileged"}})
	}
	return sd.Property{Name: name + "Ex", Value: dbus.MakeVariant(cmds)}
}
