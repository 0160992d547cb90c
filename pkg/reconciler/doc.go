// Package reconciler is the controller half of pod mode. It watches workload pods and, for each
// scheduled pod that mounts a PersistentVolume of this driver, makes sure a Mountpoint Pod serves
// that volume on the pod's node and that a MountpointS3PodAttachment records the pairing, so the
// node plugin can hand the FUSE mount to the right Mountpoint Pod.
//
// The unit of work is the sharing key (node, PV, volume handle, mount options, workload fsGroup,
// authentication source), not the pod: every event maps to the keys it affects, and one
// reconcile of a key records all of that key's pending workloads in a single write. Events for a
// key that was just reconciled are coalesced for a short window, so a burst of pods sharing a
// volume costs a few writes, not one per pod.
//
// Duplicates cannot arise: Mountpoint Pods and attachments have deterministic names (the API
// server rejects a second create), writes use optimistic concurrency, a read-your-writes
// overlay hides cache lag from the next reconcile, and duplicates found anyway (made by other
// tools or versions) are merged.
package reconciler
