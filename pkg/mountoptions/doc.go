// Package mountoptions is the hand-over protocol of pod mode, used by both sides: the node
// plugin (Send) and the Mountpoint Pod (Listen, Accept).
//
// The node plugin mounts FUSE itself and passes the open /dev/fuse descriptor to the Mountpoint
// Pod over the Unix socket <comm>/mount.sock, together with what mount-s3 needs to serve it:
//
//   - one stream connection per mount, one message per connection;
//   - the message is a JSON object {"bucketName": ..., "args": [...], "env": [...]} (Options) of
//     at most MaxMessageSize bytes, sent with sendmsg(2) together with exactly one descriptor in
//     an SCM_RIGHTS control message (should the kernel take only part of the bytes, the rest
//     follows in plain writes: the receiver reads the stream to its end); the sender then
//     half-closes the connection;
//   - the receiver reads until end of file, validates everything (Options.Validate, exactly one
//     descriptor, no unknown JSON field), lets its caller accept or refuse the options, and
//     replies with one byte: Ack, or Nak followed by the reason in plain text (at most
//     MaxReasonLen bytes); then it closes the connection.
//
// Send returns only once the options were acknowledged, so when it returns nil the Mountpoint
// Pod owns a copy of the descriptor and has removed any stale mount.err; a refusal comes back
// to the sender as an error wrapping ErrRejected with the receiver's reason.
//
// The other files of the comm directory (mount.err, mount.exit, credentials/) are named here
// too (see the constants), so the two sides cannot drift apart.
package mountoptions
