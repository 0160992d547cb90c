// Package mountresources is the resource model of a mount-s3: CPU and memory requests and
// limits, from the cluster's defaults (the controller's flags, from Helm values) and per-volume
// overrides (PV volume attributes, StorageClass parameters). In pod mode they become the
// Mountpoint Pod's container resources, in systemd mode the mount-s3 unit's cgroup settings.
package mountresources

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/s3csi/s3-csi-driver/pkg/mountargs"
)

// The volume attributes (and StorageClass parameters) that override a default, and the
// resource each sets.
const (
	AttrCPURequest    = "mountpointCPURequest"
	AttrCPULimit      = "mountpointCPULimit"
	AttrMemoryRequest = "mountpointMemoryRequest"
	AttrMemoryLimit   = "mountpointMemoryLimit"
)

type field struct {
	name  corev1.ResourceName
	limit bool
}

var attributes = map[string]field{
	AttrCPURequest:    {corev1.ResourceCPU, false},
	AttrCPULimit:      {corev1.ResourceCPU, true},
	AttrMemoryRequest: {corev1.ResourceMemory, false},
	AttrMemoryLimit:   {corev1.ResourceMemory, true},
}

// Attributes lists the attribute names, sorted.
func Attributes() []string { return slices.Sorted(maps.Keys(attributes)) }

// IsAttribute reports whether k is one of the attributes.
func IsAttribute(k string) bool { _, ok := attributes[k]; return ok }

// Parse reads one quantity; name is what the error names (a flag, an attribute, a parameter).
// A quantity must be positive: zero or a negative amount is refused, as is a CPU amount below
// a millicore.
func Parse(name, v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return q, fmt.Errorf("%s: %q is not a Kubernetes quantity; use one such as 500m (CPU) or 512Mi (memory)", name, v)
	}
	if q.Sign() <= 0 {
		return q, fmt.Errorf("%s: %q must be more than zero; leave it unset for no request or limit", name, v)
	}
	return q, nil
}

// Resolve returns defaults with the overrides attrs carries (other keys are ignored), and
// checks the result: each request at most its limit. Errors name the attribute.
func Resolve(defaults corev1.ResourceRequirements, attrs map[string]string) (corev1.ResourceRequirements, error) {
	out, err := apply(defaults, attrs, func(k string) string { return "volume attribute " + k })
	if err != nil {
		return out, err
	}
	return out, Check(out)
}

// Flags are the names of the flags carrying the cluster defaults, by attribute.
var Flags = map[string]string{
	AttrCPURequest:    "--mountpoint-cpu-request",
	AttrCPULimit:      "--mountpoint-cpu-limit",
	AttrMemoryRequest: "--mountpoint-memory-request",
	AttrMemoryLimit:   "--mountpoint-memory-limit",
}

// FromFlags builds the cluster defaults from the flags' values (by attribute, as Flags names
// them; "" or absent: unset) and checks them. Errors name the flag.
func FromFlags(values map[string]string) (corev1.ResourceRequirements, error) {
	set := map[string]string{}
	for k, v := range values {
		if v != "" {
			set[k] = v
		}
	}
	out, err := apply(corev1.ResourceRequirements{}, set, func(k string) string { return Flags[k] })
	if err != nil {
		return out, err
	}
	if err := Check(out); err != nil {
		return out, fmt.Errorf("--mountpoint-*-request/limit: %w", err)
	}
	return out, nil
}

// apply sets on a copy of base the quantities values carries by attribute; errors name what
// nameOf returns for the attribute.
func apply(base corev1.ResourceRequirements, values map[string]string, nameOf func(string) string) (corev1.ResourceRequirements, error) {
	out := corev1.ResourceRequirements{Requests: maps.Clone(base.Requests), Limits: maps.Clone(base.Limits)}
	for _, k := range Attributes() {
		v, ok := values[k]
		if !ok {
			continue
		}
		q, err := Parse(nameOf(k), v)
		if err != nil {
			return out, err
		}
		f := attributes[k]
		list := &out.Requests
		if f.limit {
			list = &out.Limits
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[f.name] = q
	}
	return out, nil
}

// Check reports a request above its limit, naming the resource, and a memory limit below
// MinMemoryLimit.
func Check(r corev1.ResourceRequirements) error {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			return fmt.Errorf("the %s request %s is above its limit %s; raise the limit or lower the request", name, req.String(), lim.String())
		}
	}
	if lim, ok := r.Limits[corev1.ResourceMemory]; ok && lim.Cmp(MinMemoryLimit) < 0 {
		return fmt.Errorf("the memory limit %s is below the %s mount-s3 needs: its memory target is at least %d MiB, and %d MiB are kept above it for its overhead; set %s or more, or no limit",
			lim.String(), minMemoryLimitText, MinMemoryTargetMiB, MinMemoryHeadroomMiB, minMemoryLimitText)
	}
	return nil
}

// mount-s3 bounds its own memory by a target (--memory-target, MiB, at least 512; by default 95%
// of its cgroup's limit, or of the machine's memory: awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3/src/cli.rs, memory_limit_setting). The target is what its buffer pool aims at,
// not a hard bound: its own overhead comes on top. Under a memory limit L (a Mountpoint Pod's
// container limit, a unit's MemoryMax) the driver gives it L less a headroom of a quarter of L,
// at least 128 MiB, so that the kernel's OOM killer is not what bounds it.
const (
	MinMemoryTargetMiB   = mountargs.MinMemoryTargetMiB
	MinMemoryHeadroomMiB = 128
)

// MinMemoryLimit is the smallest memory limit a mount may have: the least target and headroom.
var MinMemoryLimit = *resource.NewQuantity((MinMemoryTargetMiB+MinMemoryHeadroomMiB)<<20, resource.BinarySI)

// minMemoryLimitText is MinMemoryLimit's text, formatted once at start-up: Quantity.String
// caches its result in the value, so calling it on the shared variable from concurrent
// validations (parallel NodePublishVolume calls) was a data race.
var minMemoryLimitText = MinMemoryLimit.String()

// MemoryTargetMiB is the --memory-target (MiB) for a mount under the memory limit limit:
// limit − max(128 MiB, limit/4), at least 512. limit must be at least MinMemoryLimit (Check).
func MemoryTargetMiB(limit resource.Quantity) uint64 {
	l := uint64(limit.Value()) >> 20
	return max(MinMemoryTargetMiB, l-max(MinMemoryHeadroomMiB, l/4))
}

// LimitMiB is a memory limit in MiB (rounded down), 0 for none.
func LimitMiB(r corev1.ResourceRequirements) uint64 {
	if lim, ok := r.Limits[corev1.ResourceMemory]; ok {
		return uint64(lim.Value()) >> 20
	}
	return 0
}

// MinCacheVolume is the smallest cache volume accepted: below it the room CacheBudgetMiB keeps
// for mount-s3's eviction would leave no cache.
var MinCacheVolume = resource.MustParse("128Mi")

// CacheBudgetMiB is the --max-cache-size (MiB) mount-s3 gets on a cache volume of size limit:
// the volume less a tenth of it, at least 64 MiB, so that mount-s3 evicts before kubelet finds
// the volume over its limit (which evicts the whole Mountpoint Pod, ending the mount).
func CacheBudgetMiB(limit resource.Quantity) (uint64, error) {
	if limit.Cmp(MinCacheVolume) < 0 {
		return 0, fmt.Errorf("a cache volume of %s is too small; use at least %s", limit.String(), MinCacheVolume.String())
	}
	mib := uint64(limit.Value() >> 20)
	room := max(mib/10, 64)
	return mib - room, nil
}

// ParseCacheLimit reads the cache size limit flag ("" is none: a nil limit and no budget) and
// returns it with its CacheBudgetMiB. Errors name flag.
func ParseCacheLimit(flag, v string) (*resource.Quantity, uint64, error) {
	if v == "" {
		return nil, 0, nil
	}
	q, err := Parse(flag, v)
	if err != nil {
		return nil, 0, err
	}
	mib, err := CacheBudgetMiB(q)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", flag, err)
	}
	return &q, mib, nil
}
