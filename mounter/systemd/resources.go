package systemd

import (
	"context"
	"fmt"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Slice is the slice every mount-s3 unit of the driver runs in: the node-wide cap
// (Config.SliceMemoryMax, SliceCPULimit) applies to all of them together.
const Slice = "s3csi.slice"

// unitResources are a mount's cgroup settings, from the volume's resources (mounter.Request):
// the memory request protects that much from reclaim (MemoryLow), the limit is a hard cap
// (MemoryMax: past it the kernel's OOM killer ends mount-s3, and the mount monitor repairs the
// mount); the CPU request is a weight among the slice's units (CPUWeight, from the request like
// kubelet turns it into cpu.shares), the limit a quota (CPUQuota). Zero: unset.
type unitResources struct {
	MemoryLow  uint64 `json:"memoryLow,omitempty"`
	MemoryMax  uint64 `json:"memoryMax,omitempty"`
	CPUWeight  uint64 `json:"cpuWeight,omitempty"`
	CPUQuotaUS uint64 `json:"cpuQuotaPerSecUSec,omitempty"`
}

// resourcesOf maps Kubernetes requests and limits to unit settings.
func resourcesOf(r corev1.ResourceRequirements) unitResources {
	var u unitResources
	if q, ok := r.Requests[corev1.ResourceMemory]; ok {
		u.MemoryLow = uint64(q.Value())
	}
	if q, ok := r.Limits[corev1.ResourceMemory]; ok {
		u.MemoryMax = uint64(q.Value())
	}
	if q, ok := r.Requests[corev1.ResourceCPU]; ok {
		u.CPUWeight = cpuWeight(q)
	}
	if q, ok := r.Limits[corev1.ResourceCPU]; ok {
		u.CPUQuotaUS = cpuQuota(q)
	}
	return u
}

// cpuWeight is the cgroup v2 weight (1–10000) of a CPU request: kubelet's cpu.shares for it
// (1024 per CPU, at least 2) mapped to a weight the way the kernel and runc map shares.
func cpuWeight(q resource.Quantity) uint64 {
	shares := max(uint64(q.MilliValue())*1024/1000, 2)
	shares = min(shares, 262144)
	return 1 + (shares-2)*9999/262142
}

// cpuQuota is the CPU time per second (µs) of a CPU limit: 1 CPU is 1,000,000 µs per second.
func cpuQuota(q resource.Quantity) uint64 {
	return max(uint64(q.MilliValue())*1000, 1000)
}

// properties renders the settings as unit properties.
func (u unitResources) properties() []sd.Property {
	var props []sd.Property
	if u.MemoryLow > 0 {
		props = append(props, sd.Property{Name: "MemoryLow", Value: dbus.MakeVariant(u.MemoryLow)})
	}
	if u.MemoryMax > 0 {
		props = append(props, sd.Property{Name: "MemoryMax", Value: dbus.MakeVariant(u.MemoryMax)})
	}
	if u.CPUWeight > 0 {
		props = append(props, sd.Property{Name: "CPUWeight", Value: dbus.MakeVariant(u.CPUWeight)})
	}
	if u.CPUQuotaUS > 0 {
		props = append(props, sd.Property{Name: "CPUQuotaPerSecUSec", Value: dbus.MakeVariant(u.CPUQuotaUS)})
	}
	return props
}

// SliceCap is the node-wide cap of Slice: every mount-s3 unit together (zero: unset).
type SliceCap struct {
	Memory resource.Quantity
	CPU    resource.Quantity
}

// ConfigureSlice sets the node-wide cap on Slice, starting the slice when it is not there yet
// (its properties are runtime ones: they go with a reboot, and the node plugin sets them again
// at its start). A zero cap clears nothing set by hand; it sets nothing.
func (m *Mounter) ConfigureSlice(ctx context.Context, c SliceCap) error {
	u := unitResources{}
	if !c.Memory.IsZero() {
		u.MemoryMax = uint64(c.Memory.Value())
	}
	if !c.CPU.IsZero() {
		u.CPUQuotaUS = cpuQuota(c.CPU)
	}
	props := u.properties()
	if len(props) == 0 {
		return nil
	}
	return m.bus.do(ctx, func(ctx context.Context, conn dbusConn) error {
		err := conn.SetUnitPropertiesContext(ctx, Slice, true, props...)
		if err == nil {
			return nil
		}
		// Not loaded yet: start it with the cap.
		ch := make(chan string, 1)
		if _, serr := conn.StartTransientUnitContext(ctx, Slice, "replace", append([]sd.Property{sd.PropDescription("mount-s3 of the S3 CSI driver")}, props...), ch); serr != nil {
			return fmt.Errorf("set the cap of %s: %w (and starting it: %w)", Slice, err, serr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-ch:
			if r != "done" {
				return fmt.Errorf("start %s: %s", Slice, r)
			}
		}
		return nil
	})
}
