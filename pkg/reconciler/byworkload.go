package reconciler

import (
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
)

// workloadAttachments maps each workload pod UID to the names of the attachments recording it,
// fed by the attachment informer's events. It replaces a field index on the workload UIDs,
// which keeps a set per UID (about 300 bytes each, more than a workload weighs); here a UID
// costs a map entry and, almost always, a one-name slice. Safe for concurrent use.
type workloadAttachments struct {
	mu    sync.RWMutex
	byUID map[string][]string
}

func newWorkloadAttachments() *workloadAttachments {
	return &workloadAttachments{byUID: map[string][]string{}}
}

// uidsOf lists the workload UIDs a recorded.
func uidsOf(a *crdv2.MountpointS3PodAttachment) map[string]bool {
	out := map[string]bool{}
	for _, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			out[w.WorkloadPodUID] = true
		}
	}
	return out
}

// update records that the attachment named name went from old to cur (either nil).
func (x *workloadAttachments) update(name string, old, cur *crdv2.MountpointS3PodAttachment) {
	var before, after map[string]bool
	if old != nil {
		before = uidsOf(old)
	}
	if cur != nil {
		after = uidsOf(cur)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for uid := range before {
		if !after[uid] {
			names := slices.DeleteFunc(x.byUID[uid], func(n string) bool { return n == name })
			if len(names) == 0 {
				delete(x.byUID, uid)
			} else {
				x.byUID[uid] = names
			}
		}
	}
	for uid := range after {
		if !before[uid] && !slices.Contains(x.byUID[uid], name) {
			x.byUID[uid] = append(x.byUID[uid], name)
		}
	}
}

// names returns the names of the attachments recording the workload uid.
func (x *workloadAttachments) names(uid string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Clone(x.byUID[uid])
}

// handler is the informer event handler that keeps x up to date.
func (x *workloadAttachments) handler() toolscache.ResourceEventHandler {
	as := func(obj any) *crdv2.MountpointS3PodAttachment {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		a, _ := obj.(*crdv2.MountpointS3PodAttachment)
		return a
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if a := as(obj); a != nil {
				x.update(a.Name, nil, a)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if o, a := as(oldObj), as(newObj); o != nil && a != nil {
				x.update(a.Name, o, a)
			}
		},
		DeleteFunc: func(obj any) {
			if a := as(obj); a != nil {
				x.update(a.Name, a, nil)
			}
		},
	}
}
