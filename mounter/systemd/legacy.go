package systemd

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/legacy"
)

// legacyUnit is a mount unit of the Scality driver 1.x, found by the target its mount-s3 runs on.
type legacyUnit struct {
	Name   string
	Bucket string
	Env    []string
}

// pluginDir is where the 1.x driver kept its credential files (the state directory's parent,
// <kubelet>/plugins/s3.csi.scality.com).
func (m *Mounter) pluginDir() string { return filepath.Dir(m.cfg.StateDir) }

// findLegacyUnit returns the loaded 1.x unit whose mount-s3 mounts target, the active one
// when there are several (ok false when there is none: the manager restarted since, or the unit
// is gone).
func (m *Mounter) findLegacyUnit(ctx context.Context, target string) (u legacyUnit, ok bool, err error) {
	units, err := m.findLegacyUnits(ctx, target)
	if err != nil || len(units) == 0 {
		return legacyUnit{}, false, err
	}
	return units[0], true, nil
}

// findLegacyUnits returns every loaded 1.x unit for target, active ones first. There can be
// more than one: a 1.x node plugin that gets kubelet's republish of a target it already mounted
// starts another unit, which fails (the target is a mount point) and stays loaded.
func (m *Mounter) findLegacyUnits(ctx context.Context, target string) (found []legacyUnit, err error) {
	err = m.bus.do(ctx, func(ctx context.Context, c dbusConn) error {
		found = nil
		units, err := c.ListUnitsByPatternsContext(ctx, nil, []string{legacy.UnitPattern})
		if err != nil {
			return fmt.Errorf("list 1.x units: %w", err)
		}
		var inactive []legacyUnit
		for _, unit := range units {
			if !legacy.IsUnit(unit.Name) {
				continue
			}
			p, err := c.GetServicePropertyContext(ctx, unit.Name, "ExecStart")
			if err != nil {
				continue // gone meanwhile
			}
			argv := execArgv(p.Value.Value())
			if len(argv) < 3 || argv[len(argv)-1] != target {
				continue
			}
			u := legacyUnit{Name: unit.Name, Bucket: argv[len(argv)-2]}
			if e, err := c.GetServicePropertyContext(ctx, unit.Name, "Environment"); err == nil {
				u.Env, _ = e.Value.Value().([]string)
			}
			if unit.ActiveState == "active" {
				found = append(found, u)
			} else {
				inactive = append(inactive, u)
			}
		}
		found = append(found, inactive...)
		return nil
	})
	return found, err
}

// execArgv returns the argv of the first command of an ExecStart property (D-Bus
// a(sasbttttuii)), nil when it has another shape.
func execArgv(v any) []string {
	cmds, ok := v.([][]any)
	if !ok || len(cmds) == 0 || len(cmds[0]) < 2 {
		return nil
	}
	argv, _ := cmds[0][1].([]string)
	return argv
}

// adoptLegacy keeps a live mount of the 1.x driver at req.Target (kubelet's republish after an
// upgrade): no second mount is stacked on it; when its unit is found, the bucket must match and
// its credential files in the plugin directory are rewritten with the request's credentials.
func (m *Mounter) adoptLegacy(ctx context.Context, req mounter.Request) error {
	u, found, err := m.findLegacyUnit(ctx, req.Target)
	if err != nil {
		return err
	}
	files := legacy.FilesFor(req.WorkloadPodUID, req.VolumeID)
	if found {
		if u.Bucket != req.Bucket {
			return fmt.Errorf("%w: %s holds a mount of bucket %q made by the 1.x driver (unit %s), not of bucket %q", mounter.ErrTargetInUse, req.Target, u.Bucket, u.Name, req.Bucket)
		}
		if f, ok := legacy.FilesFromEnv(m.pluginDir(), u.Env); ok {
			files = f
		}
	}
	if req.Credentials != nil && req.WorkloadPodUID != "" {
		wrote, err := legacy.Refresh(m.pluginDir(), files, *req.Credentials)
		if err != nil {
			return fmt.Errorf("refresh the credentials of a 1.x mount: %w", err)
		}
		klog.V(4).InfoS("Refreshed the credentials of a 1.x mount", "target", req.Target, "written", wrote)
	}
	klog.V(2).InfoS("Keeping a live mount of the 1.x driver", "target", req.Target, "volumeID", req.VolumeID, "unit", u.Name)
	return nil
}

// forgetLegacy removes what the 1.x driver kept for a mount that is now unmounted: its unit
// (stopped and reset if still loaded) and its credential files.
func (m *Mounter) forgetLegacy(ctx context.Context, u legacyUnit) error {
	if err := m.stopUnit(ctx, u.Name); err != nil {
		return err
	}
	if f, ok := legacy.FilesFromEnv(m.pluginDir(), u.Env); ok {
		if err := legacy.Remove(m.pluginDir(), f); err != nil {
			return fmt.Errorf("remove the credential files of 1.x unit %s: %w", u.Name, err)
		}
	}
	klog.V(2).InfoS("Removed a 1.x mount unit and its files", "unit", u.Name)
	return nil
}
