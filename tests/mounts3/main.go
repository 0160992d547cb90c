// Command mount-s3 is a TEST STAND-IN for AWS's mount-s3 (Mountpoint for Amazon S3), written
// in Go on go-fuse and aws-sdk-go-v2 because the real (Rust) binary cannot be built here. It
// is test infrastructure only and is never shipped.
//
// Supported, with mount-s3's observable behaviour:
//   - the complete mount-s3 command line (clap rules: options anywhere, --k=v and --k v,
//     bundled short flags, conflicts/requires, value validation); usage errors are printed
//     clap-style to stderr with exit status 2 and nothing is mounted;
//   - configuration from the environment via the SDK's default chain (AWS_ACCESS_KEY_ID...,
//     AWS_PROFILE/AWS_CONFIG_FILE/AWS_SHARED_CREDENTIALS_FILE, AWS_REGION, AWS_ENDPOINT_URL,
//     AWS_MAX_ATTEMPTS), overridden by --profile, --region, --endpoint-url;
//     --force-path-style, --no-sign-request, --expected-bucket-owner, --requester-pays,
//     --storage-class, --sse/--sse-kms-key-id and --upload-checksums reach the S3 requests;
//   - the startup ListObjectsV2 probe and mount-s3's "Error: ... Caused by:" messages (exit 1);
//   - daemonising (see daemonize) unless --foreground; UNSTABLE_MOUNTPOINT_PID_FILE;
//   - mounting on a directory (source "mountpoint-s3", type "fuse", default_permissions,
//     allow_other for --allow-other/--allow-root, ro for --read-only) or serving a
//     caller-mounted /dev/fd/N;
//   - file system semantics of mount-s3 for general purpose buckets (see fs.go): listing,
//     lookups, ranged reads, sequential writes of new files uploaded with one PutObject on
//     close/fsync, --allow-overwrite with O_TRUNC, --allow-delete, local mkdir/rmdir, rename
//     unsupported (ENOSYS), --prefix, --uid/--gid/--dir-mode/--file-mode, --metadata-ttl and
//     --negative-metadata-ttl as kernel cache lifetimes;
//   - exit 0 when unmounted from outside, unmount + exit 0 on SIGTERM/SIGINT.
//
// Deliberate choices where mount-s3's behaviour is unspecified or not reproducible: chmod and
// chown succeed without effect; changing times works only on files being written (else
// EPERM); FUSE interrupts are ignored; a daemon child replaces a pipe on stderr with
// /dev/null once mounted (mount-s3 closes stderr then), keeping files, sockets and ttys.
//
// Passed to the SDK but untested: --transfer-acceleration, --dual-stack. Accepted without
// effect: --bucket-type, --incremental-upload (appends are still rejected), --auto-unmount (beyond
// the SIGTERM handling), --max-threads, part sizes, --maximum-throughput-gbps, --cache,
// --max-cache-size, --cache-xz (no data cache; --cache only changes the default TTL to 60s),
// --user-agent-prefix, --bind, --log-metrics, --debug-crt, --infer-content-type,
// --max-memory-target, --otlp-endpoint, --otlp-export-interval. Logs are single lines in a file
// under --log-directory, else on standard output in the foreground and in syslog in the
// background (CONFORMANCE.md, rows L1-L5); --debug adds per-operation lines.
//
// One test hook, not a behaviour of mount-s3 (grow.go): reading an object named
// .s3csi-standin-grow-<MiB> makes the stand-in take that much more memory, so that memory
// limits can be exercised on real cgroups.
//
// CONFORMANCE.md lists, row by row, each behaviour the driver relies on, where the real
// mount-s3 implements it, and the test that shows this stand-in does the same; in particular
// the mount point checks (an existing directory that is not already a mount point; /dev/fd/N
// open on /dev/fuse read-write, without --read-only or --auto-unmount) and the FUSE session's
// ACL (the owner only, root too with --allow-root, everyone with --allow-other).
//
// Not supported: multipart uploads (a new file is buffered in memory and sent with one
// PutObject), S3 Express directory-bucket semantics, and any data caching.
package main

import (
	"context"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"
)

// version is what --version prints.
const version = "mount-s3 1.24.0"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprint(stderr, err.Error())
		return 2
	}
	switch {
	case o.Help:
		fmt.Fprint(stdout, helpText)
		return 0
	case o.Version:
		fmt.Fprintln(stdout, version)
		return 0
	}
	if fd, ok := os.LookupEnv(daemonEnv); ok {
		return daemonChild(o, fd, notifySignals())
	}
	if o.MetadataTTL.zero && !o.Foreground {
		fmt.Fprintln(stderr, "warning: The '--metadata-ttl 0' setting is no longer supported, is now interpreted as 'minimal', and will be removed in a future release. Use '--metadata-ttl minimal' instead")
	}
	if !o.Foreground {
		return daemonize(args, stdout, stderr)
	}
	sigs := notifySignals()
	defer signal.Stop(sigs)
	log := newLogger(o, stdout)
	m, err := mount(o, log)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return serve(m, log, sigs, func() {
		fmt.Fprintf(stdout, "%s is mounted at %s\n", describeBucket(o), o.MountPoint)
	})
}

// describeBucket is mount-s3's human-readable name of what is mounted.
func describeBucket(o *Options) string {
	if o.Prefix != "" {
		return fmt.Sprintf("prefix %s of bucket %s", o.Prefix, o.Bucket)
	}
	return "bucket " + o.Bucket
}

// newLogger opens mount-s3's log (CONFORMANCE.md, rows L1-L4): none with --no-log; a new file
// under --log-directory; otherwise standard output in the foreground, and syslog (facility
// daemon, tag mount-s3) in the background, where a missing syslog socket means no log, as
// for the real one.
func newLogger(o *Options, stdout io.Writer) *logger {
	l := &logger{debug: o.Debug}
	switch {
	case o.NoLog:
	case o.LogDirectory != "":
		name := fmt.Sprintf("mountpoint-s3-%s.%d.log", time.Now().UTC().Format("2006-01-02T15-04-05Z"), os.Getpid())
		if err := os.MkdirAll(o.LogDirectory, 0o755); err == nil {
			if f, err := os.OpenFile(filepath.Join(o.LogDirectory, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
				l.w = f
			}
		}
	case o.Foreground:
		l.w = stdout
	default:
		if w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_INFO, "mount-s3"); err == nil {
			l.w = w
		}
	}
	return l
}

// ttls turns the TTL options into kernel cache lifetimes (files, directories, negative
// entries). "minimal" (the default, and "0") caches files not at all and directories for 1s;
// with --cache the default is 60s; "indefinite" is 100 years; the negative TTL defaults to
// the metadata TTL except that "minimal" disables negative caching.
func ttls(o *Options) (file, dir, neg time.Duration) {
	conv := func(t ttl) (time.Duration, time.Duration) {
		switch {
		case t.indefinite:
			d := 100 * 365 * 24 * time.Hour
			return d, d
		case t.minimal:
			return 0, time.Second
		}
		return t.d, t.d
	}
	m := o.MetadataTTL
	if !m.set {
		m = ttl{minimal: true}
		if o.Cache != "" || o.CacheXZ != "" {
			m = ttl{d: 60 * time.Second}
		}
	}
	file, dir = conv(m)
	neg = file
	if o.NegativeMetadataTTL.set {
		neg, _ = conv(o.NegativeMetadataTTL)
	}
	return file, dir, neg
}

// cacheSubdir is the directory mount-s3 makes for its data cache inside the --cache directory.
const cacheSubdir = "mountpoint-cache"

// makeCacheDir does what mount-s3 does with --cache at start (CONFORMANCE.md O6): it replaces
// any directory an earlier run left with a new, empty one of its own (0700) inside the given
// directory, and refuses to start when it cannot, e.g. when its user may not write there.
func makeCacheDir(parent string) error {
	sub := filepath.Join(parent, cacheSubdir)
	err := os.RemoveAll(sub)
	if err == nil {
		err = os.Mkdir(sub, 0o700)
	}
	if err != nil {
		return fmt.Errorf("failed to create cache directory\n\nCaused by:\n    %v", err)
	}
	return nil
}

// mount runs mount-s3's startup sequence: mount point check, SSE check, PID file, S3 client,
// the ListObjectsV2 probe, then the FUSE mount. Errors carry mount-s3's message text.
func mount(o *Options, log *logger) (*mounted, error) {
	if err := checkMountPoint(o); err != nil {
		return nil, err
	}
	if o.SSEKMSKeyID != "" && o.SSE == "AES256" {
		return nil, fmt.Errorf("--sse-kms-key-id can not be used with --sse AES256")
	}
	if p := os.Getenv("UNSTABLE_MOUNTPOINT_PID_FILE"); p != "" {
		if err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, fmt.Errorf("failed to write PID to file\n\nCaused by:\n    %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, region, err := newS3Client(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("Failed to create S3 client\n\nCaused by:\n    %v", err)
	}
	st := &s3Store{c: client, bucket: o.Bucket, o: o}
	if err := st.checkBucket(ctx, region); err != nil {
		return nil, err
	}
	if o.Cache != "" {
		if err := makeCacheDir(o.Cache); err != nil {
			return nil, err
		}
	}
	cfg := fsConfig{
		prefix: o.Prefix, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), dirMode: 0o755, fileMode: 0o644,
		readOnly: o.ReadOnly, allowDelete: o.AllowDelete, allowOverwrite: o.AllowOverwrite,
	}
	if o.HasUID {
		cfg.uid = o.UID
	}
	if o.HasGID {
		cfg.gid = o.GID
	}
	if o.HasDirMode {
		cfg.dirMode = o.DirMode
	}
	if o.HasFileMode {
		cfg.fileMode = o.FileMode
	}
	var neg time.Duration
	cfg.fileTTL, cfg.dirTTL, neg = ttls(o)
	m, err := mountFS(o, newRoot(st, cfg, log), neg)
	if err != nil {
		return nil, fmt.Errorf("Failed to create FUSE session\n\nCaused by:\n    %v", err)
	}
	log.printf("%s mounted at %s (region %s)", describeBucket(o), o.MountPoint, region)
	return m, nil
}
