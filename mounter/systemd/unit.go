package systemd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/pkg/proxyenv"
	"github.com/s3csi/s3-csi-driver/pkg/safetext"
)

// mountID is the deterministic identifier of the mount at target: a restarted plugin derives
// the same unit names and state directory from the target path alone.
func mountID(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:8])
}

// MountUnitName returns the transient unit that runs mount-s3 for target.
func MountUnitName(target string) string { return "mount-s3-" + mountID(target) + ".service" }

// umountUnitName returns the transient unit that unmounts target.
func umountUnitName(target string) string { return "mount-s3-umount-" + mountID(target) + ".service" }

// logFileName is mount-s3's stdout/stderr inside the mount's state directory.
const logFileName = "mount-s3.log"

// unmanagedEnv are variables a unit must never inherit from the service manager's own
// environment: mount-s3 gets credentials, endpoint, region and proxy only from what the
// driver sets. The UNSTABLE_MOUNTPOINT_ ones change what mount-s3 does to the node
// (tests/mounts3/CONFORMANCE.md, rows D5, P5, P6): a PID file written at any path, a cache
// left on the node's disk after the mount, and FUSE channels opened from /dev/fuse, which a
// protected unit (--mount-s3-protect-system) does not have.
var unmanagedEnv = append([]string{
	"UNSTABLE_MOUNTPOINT_PID_FILE", "UNSTABLE_MOUNTPOINT_DISABLE_CACHE_CLEANUP", "UNSTABLE_MOUNTPOINT_CLONE_FUSE_FD",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
	"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
	"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
	"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"AWS_MAX_ATTEMPTS", "AWS_CA_BUNDLE",
}, proxyenv.Names...)

// unitSpec is everything needed to start one transient unit.
type unitSpec struct {
	description string
	kind        string // "forking" or "oneshot"
	argv        []string
	// more are further ExecStart commands, run in order after argv (oneshot units only).
	more [][]string
	// pre are ExecStartPre commands, run in order before argv; post are ExecStartPost
	// commands, run once argv's start completed (for forking units: mount-s3 mounted).
	pre  [][]string
	post [][]string
	// handover: pre and post run with full privileges ("+"), the unit's descriptor store takes
	// the FUSE connection scality-fuse-helper (in pre) hands over, and the unit's own processes
	// (mount-s3) get no capability (handover.go).
	handover bool
	// protect gives the unit a mount namespace of its own (protect.go; only with handover).
	protect bool
	// user runs the unit's own processes (mount-s3, not its "+" commands) as a dedicated user
	// (nil: root); fullPrivileges leaves the sandbox out (the oneshot that creates that user).
	user           *runAs
	fullPrivileges bool
	// keepFailed keeps the unit loaded after a failure, with its Result (success, signal,
	// oom-kill, ...), until the driver reads it and resets the unit; otherwise it goes at once.
	keepFailed bool
	env        []string
	logFile    string
	timeout    time.Duration
	// slice is the unit's slice ("" for the manager's default); resources its cgroup settings.
	slice     string
	resources unitResources
}

// execCommand is one entry of systemd's ExecStart/ExecStartPre properties (D-Bus a(sasb)): the
// program, its argv, and whether a failure is ignored. go-systemd names that last field
// UncleanIsFailure, but systemd reads it as "ignore failure": it must be false, or a failing
// command (an umount that did not unmount) would let its job end "done".
type execCommand struct {
	Path          string
	Args          []string
	IgnoreFailure bool
}

// ExecProperty is the property name (ExecStart, ExecStartPre, ...) running each argv in turn
// (argv[0] is the program), none of whose failures is ignored.
func ExecProperty(name string, argvs ...[]string) sd.Property {
	cmds := make([]execCommand, 0, len(argvs))
	for _, a := range argvs {
		cmds = append(cmds, execCommand{Path: a[0], Args: a})
	}
	return sd.Property{Name: name, Value: dbus.MakeVariant(cmds)}
}

// properties renders the spec as transient-unit properties. Nothing secret can be in a spec:
// credentials travel as files referenced by env paths.
func (u unitSpec) properties() []sd.Property {
	env := slices.Clone(u.env)
	slices.Sort(env)
	var unset []string
	for _, k := range unmanagedEnv {
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") }) {
			unset = append(unset, k)
		}
	}
	props := []sd.Property{
		sd.PropDescription(u.description),
		sd.PropType(u.kind),
		ExecProperty("ExecStart", append([][]string{u.argv}, u.more...)...),
		{Name: "Environment", Value: dbus.MakeVariant(env)},
		{Name: "UnsetEnvironment", Value: dbus.MakeVariant(unset)},
		{Name: "StandardInput", Value: dbus.MakeVariant("null")},
		{Name: "StandardOutputFile", Value: dbus.MakeVariant(u.logFile)},
		{Name: "StandardErrorFile", Value: dbus.MakeVariant(u.logFile)},
		{Name: "CollectMode", Value: dbus.MakeVariant(u.collectMode())},
		{Name: "TimeoutStartUSec", Value: dbus.MakeVariant(uint64(u.timeout / time.Microsecond))},
	}
	sandbox := Sandbox()
	if u.fullPrivileges {
		sandbox = nil
	}
	if u.handover {
		// mount-s3 serves a descriptor: it needs no capability (CONFORMANCE.md P2).
		for i := range sandbox {
			if sandbox[i].Name == "CapabilityBoundingSet" {
				sandbox[i].Value = dbus.MakeVariant(uint64(0))
			}
		}
		props = append(props,
			sd.Property{Name: "FileDescriptorStoreMax", Value: dbus.MakeVariant(uint32(1))},
			sd.Property{Name: "NotifyAccess", Value: dbus.MakeVariant("all")})
	}
	props = append(props, sandbox...)
	if u.protect && u.handover {
		props = append(props, protectProperties(writablePaths(u.argv))...)
	}
	props = append(props, u.user.properties()...)
	if u.slice != "" {
		props = append(props, sd.PropSlice(u.slice))
	}
	props = append(props, u.resources.properties()...)
	exec := ExecProperty
	if u.handover {
		exec = privilegedExecProperty
	}
	if len(u.pre) > 0 {
		props = append(props, exec("ExecStartPre", u.pre...))
	}
	if len(u.post) > 0 {
		props = append(props, exec("ExecStartPost", u.post...))
	}
	if u.kind == "forking" {
		// Give mount-s3 time to flush when the unit is stopped; its FUSE mount is already
		// gone by then because the driver unmounts first.
		props = append(props, sd.Property{Name: "TimeoutStopUSec", Value: dbus.MakeVariant(uint64(30 * time.Second / time.Microsecond))})
	}
	return props
}

// collectMode is when systemd unloads the transient unit: once inactive, even after a failure,
// so that nothing lingers, unless the unit is kept failed for the driver to read how it ended.
func (u unitSpec) collectMode() string {
	if u.keepFailed {
		return "inactive"
	}
	return "inactive-or-failed"
}

// record is what the driver remembers about a mount, in the mount's state directory, so that
// a republish can tell "same volume" from "something else" after a plugin restart. It holds
// nothing secret.
type record struct {
	VolumeID string   `json:"volumeID"`
	Bucket   string   `json:"bucket"`
	Target   string   `json:"target"`
	ReadOnly bool     `json:"readOnly"`
	Args     []string `json:"args"`
	// Env is mount-s3's environment (endpoint, region, paths of the credential and CA files in
	// the state directory): with Args, what Repair needs to start the mount again.
	Env []string `json:"env"`
	// The workload pod, for the Events of the node plugin's monitor.
	WorkloadPodUID    string `json:"workloadPodUID,omitempty"`
	WorkloadPodName   string `json:"workloadPodName,omitempty"`
	WorkloadNamespace string `json:"workloadNamespace,omitempty"`
	PVName            string `json:"pvName,omitempty"`
	Recovery          string `json:"recovery,omitempty"`
	// RunAs is the user mount-s3 runs as (nil: root, as every mount of earlier releases): the
	// mount's files were made for it, so a repair keeps it.
	RunAs *runAs `json:"runAs,omitempty"`
	// Resources are the unit's cgroup settings (a repair starts it with the same).
	Resources unitResources `json:"resources,omitzero"`
}

const recordFileName = "mount.json"

func writeRecord(dir string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFileName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write mount record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, recordFileName)); err != nil {
		return fmt.Errorf("write mount record: %w", err)
	}
	return nil
}

func readRecord(dir string) (record, error) {
	var r record
	b, err := os.ReadFile(filepath.Join(dir, recordFileName)) //nolint:gosec // G304: the driver's own root-only state directory
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("parse mount record: %w", err)
	}
	return r, nil
}

// recordCache keeps parsed records by state directory, each with the identity of the file it
// was read from. Only this mounter writes and removes records, and it tells the cache (put,
// drop), so between full scans of the state directory (at most rescanEvery apart) the cache is
// the list: a monitor sweep at a thousand mounts lists them without a system call per mount.
// A scan reads a record again only when its file changed.
type recordCache struct {
	mu      sync.Mutex
	entries map[string]cachedRecord
	scanned time.Time // last full scan (zero: none yet)
}

// rescanEvery bounds how long the cache serves the list without reading the directory.
const rescanEvery = 30 * time.Second

type cachedRecord struct {
	ino, size int64
	mod       time.Time
	rec       record
}

// read returns the record in dir, as readRecord does.
func (c *recordCache) read(dir string) (record, error) {
	path := filepath.Join(dir, recordFileName)
	st, err := os.Stat(path)
	if err != nil {
		c.drop(dir)
		return record{}, err
	}
	ino := fileIno(st)
	c.mu.Lock()
	e, ok := c.entries[dir]
	c.mu.Unlock()
	if ok && e.ino == ino && e.size == st.Size() && e.mod.Equal(st.ModTime()) {
		return e.rec, nil
	}
	rec, err := readRecord(dir)
	if err != nil {
		return rec, err
	}
	c.store(dir, st, rec)
	return rec, nil
}

// put records that rec was just written to dir.
func (c *recordCache) put(dir string, rec record) {
	st, err := os.Stat(filepath.Join(dir, recordFileName))
	if err != nil {
		c.drop(dir)
		return
	}
	c.store(dir, st, rec)
}

func (c *recordCache) store(dir string, st os.FileInfo, rec record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]cachedRecord{}
	}
	c.entries[dir] = cachedRecord{ino: fileIno(st), size: st.Size(), mod: st.ModTime(), rec: rec}
}

// drop forgets dir (its state was removed).
func (c *recordCache) drop(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, dir)
}

// cached returns the cached records by directory, when the last full scan is recent enough
// for them to be the list.
func (c *recordCache) cached(now time.Time) (map[string]record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freshLocked(now) {
		return nil, false
	}
	out := make(map[string]record, len(c.entries))
	for d, e := range c.entries {
		out[d] = e.rec
	}
	return out, true
}

// has reports whether dir has a record, and whether the cache can say (a recent full scan).
func (c *recordCache) has(dir string, now time.Time) (recorded, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freshLocked(now) {
		return false, false
	}
	_, ok := c.entries[dir]
	return ok, true
}

// freshLocked reports whether the last full scan is recent enough for the cache to be the list.
func (c *recordCache) freshLocked(now time.Time) bool {
	return !c.scanned.IsZero() && now.Sub(c.scanned) < rescanEvery
}

// scannedAt forgets the directories not in dirs (their mounts were unpublished) and notes a
// full scan at now.
func (c *recordCache) scannedAt(dirs map[string]bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.entries {
		if !dirs[d] {
			delete(c.entries, d)
		}
	}
	c.scanned = now
}

// fileIno is the inode of a file (0 where the platform does not say).
func fileIno(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int64(sys.Ino) //nolint:gosec // G115: an inode number only compared for equality
	}
	return 0
}

// tail returns at most the last n bytes of a file, trimmed and escaped (safetext.Escape: one
// line, no control characters), or "" when it cannot be read.
func tail(path string, n int64) string {
	f, err := os.Open(path) //nolint:gosec // G304: a unit's output file in the driver's own state directory
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return ""
	}
	return safetext.Escape(strings.TrimSpace(string(buf))) // mount-s3 prints what S3 and objects say
}
