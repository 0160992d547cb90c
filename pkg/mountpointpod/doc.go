// Package mountpointpod is the program of a Mountpoint Pod (cmd/scality-csi-mounter): it
// receives one FUSE mount from the node plugin and serves it with mount-s3 in the foreground.
//
// The contract with the node plugin, through the pod's comm directory (file names and the
// message format are in pkg/mountoptions):
//
//  1. At start, if mount.exit exists, Run returns nil at once: the pod was retired before it
//     mounted anything. Otherwise it listens on mount.sock (mode 0600).
//  2. It waits for one valid message: Options and the /dev/fuse descriptor. A refused message
//     (malformed, oversized, not exactly one descriptor, a descriptor that is not /dev/fuse,
//     arguments that are not plain long options) is logged, the sender gets the reason, and
//     waiting goes on. If mount.exit appears (pkg/filewatch: fsnotify, no polling) or a
//     termination signal arrives while waiting, Run returns nil.
//  3. On acceptance, before acknowledging, it removes a stale mount.err; then it stops
//     listening (the socket file is removed).
//  4. It runs `mount-s3 <bucket> /dev/fd/3 --foreground <args>` with the descriptor as fd 3,
//     with exactly the received environment (nothing inherited), in its own process group
//     (a signal for the pod never reaches mount-s3), killed if this process dies. Its output
//     goes to the container's; the last 64 KiB of its stderr are also kept.
//  5. While mount-s3 runs, termination signals are logged and ignored: a node drain must not
//     cut a mount that workloads still use; the node unmounts it when they are gone (the pod's
//     grace period bounds the wait).
//  6. When mount-s3 exits non-zero, or cannot start, mount.err receives its stderr tail
//     (written atomically, mode 0644) before this process lets go of the FUSE descriptor, and
//     Run returns an error wrapping ErrMountS3Failed (the pod restarts). When it exits 0, Run
//     returns nil if mount.exit exists (the pod ends Succeeded), else ErrUnexpectedExit.
//
// Arguments that name host paths mean nothing inside the pod and are rewritten:
// --cache=<dir> gets a fresh private directory in the container's temporary directory
// (removed when mount-s3 ends; the cache is ephemeral), --log-directory=<dir> is dropped
// (in the foreground mount-s3 then logs to its standard output, i.e. the container log), and
// --foreground is added. --read-only and --auto-unmount, which mount-s3 refuses with a FUSE fd,
// are dropped: the node plugin's mount(2) call applies them.
//
// Nothing here needs privileges: the pod runs as a non-root user that can write the comm
// directory (fsGroup) and read the credential files the node plugin wrote there.
package mountpointpod
