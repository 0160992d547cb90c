package systemd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/s3csi/s3-csi-driver/mounter"
)

// resultFileName is where a mount unit leaves how it ended (systemd's $SERVICE_RESULT: success,
// exit-code, signal, core-dump, timeout, oom-kill, ...), in the mount's state directory.
const resultFileName = "mount-s3.result"

// recordResult is the ExecStopPost command that writes the unit's result to path. systemd puts
// the result in the command's environment ($SERVICE_RESULT) and substitutes ${SERVICE_RESULT}
// in its arguments; the shell only writes its first argument to its second.
func recordResult(path string) []string {
	return []string{"/bin/sh", "-c", `printf '%s\n' "$1" > "$2"`, "sh", "${SERVICE_RESULT}", path}
}

// resultOOMKill is systemd's result of a unit whose process the kernel's OOM killer ended.
const resultOOMKill = "oom-kill"

// HowItEnded implements mounter.EndReporter: the result the unit of target's mount left when it
// stopped (at or after since less a minute); an OOM kill is reported with the unit's MemoryMax.
func (m *Mounter) HowItEnded(_ context.Context, target string, since time.Time) mounter.Ending {
	dir := m.stateDir(target)
	// The unit's own processes write the file: never follow a link there, read a few bytes.
	f, err := os.OpenFile(filepath.Join(dir, resultFileName), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0) //nolint:gosec // G304: the driver's own state directory
	if err != nil {
		return mounter.Ending{}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.ModTime().Before(since.Add(-time.Minute)) {
		return mounter.Ending{}
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil || strings.TrimSpace(string(b)) != resultOOMKill {
		return mounter.Ending{}
	}
	rec, err := m.records.read(dir)
	limit := "no MemoryMax (the node ran out of memory)"
	if err == nil && rec.Resources.MemoryMax > 0 {
		limit = "its MemoryMax=" + resource.NewQuantity(int64(rec.Resources.MemoryMax), resource.BinarySI).String()
	}
	return mounter.Ending{OOMKilled: true, Detail: fmt.Sprintf("mount-s3 (unit %s) was OOM-killed at %s", MountUnitName(target), limit)}
}
