package reconciler

import (
	"sync"
	"time"

	crdv2 "github.com/s3csi/s3-csi-driver/crd/v2"
	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
)

// overlay remembers the controller's own latest attachment writes per key, until the cache has
// caught up with them, so the next reconcile of the key starts from what was written rather than
// from a stale cached copy (which would cost a conflict and a retry, or a duplicate create).
type overlay struct {
	mu      sync.Mutex
	written map[podcontract.Key]writtenAttachment
}

type writtenAttachment struct {
	obj      *crdv2.MountpointS3PodAttachment // nil: we deleted it
	replaced string                           // resourceVersion the write replaced ("" for a create)
}

// remember records a write (obj nil for a delete of an object at version replaced).
func (o *overlay) remember(k podcontract.Key, obj *crdv2.MountpointS3PodAttachment, replaced string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written == nil {
		o.written = map[podcontract.Key]writtenAttachment{}
	}
	o.written[k] = writtenAttachment{obj: obj, replaced: replaced}
}

// forget drops what is remembered for k (after a conflict: the cache knows better).
func (o *overlay) forget(k podcontract.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.written, k)
}

// resolve returns the current attachment of key k named name, given the cached copy (nil when
// the cache has none). A cached copy older than our own write is replaced by the write; once the
// cache has our write (or something newer) the memory is dropped.
func (o *overlay) resolve(k podcontract.Key, cached *crdv2.MountpointS3PodAttachment) *crdv2.MountpointS3PodAttachment {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.written[k]
	if !ok {
		return cached
	}
	switch {
	case w.obj == nil: // we deleted it
		if cached != nil && cached.ResourceVersion == w.replaced {
			return nil // the cache has not seen the delete yet
		}
	case cached == nil:
		if w.replaced == "" {
			return w.obj.DeepCopy() // the cache has not seen our create yet
		}
	case cached.ResourceVersion == w.replaced:
		return w.obj.DeepCopy() // the cache has not seen our update yet
	}
	delete(o.written, k)
	return cached
}

// podExpectations remembers Mountpoint Pods this controller created until the cache shows them,
// so an attachment that names a brand-new pod is not mistaken for one whose pod vanished.
type podExpectations struct {
	mu      sync.Mutex
	created map[string]time.Time
}

// expectationTTL bounds how long a created pod is assumed to exist without the cache seeing it.
const expectationTTL = time.Minute

func (e *podExpectations) add(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.created == nil {
		e.created = map[string]time.Time{}
	}
	e.created[name] = time.Now()
}

// pending reports whether name was created recently and is still expected to appear.
func (e *podExpectations) pending(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.created[name]
	if ok && time.Since(t) > expectationTTL {
		delete(e.created, name)
		return false
	}
	return ok
}

// observed drops the expectation once the cache has the pod.
func (e *podExpectations) observed(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.created, name)
}
