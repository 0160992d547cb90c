// Command mount-s3 is a TEST STAND-IN for AWS's mount-s3 (Mountpoint for Amazon S3) 1.24.0,
// written in Go on go-fuse and aws-sdk-go-v2 because the real (Rust) binary cannot be built
// here. It is test infrastructure only and is never shipped.
//
// CONFORMANCE.md lists, row by row, each behaviour at a boundary the driver touches, where the
// real mount-s3 implements it (awslabs/mountpoint-s3@58817cab2), and the test that shows this
// stand-in does the same. In short:
//   - the command line of the release binary (clap rules, usage errors exit 2) and its
//     start-up refusals (exit 1): mount point checks, SSE, the memory target and part sizes,
//     the CA bundle, the ListObjectsV2 probe, the cache directory, the FUSE mount as libfuse 2
//     makes it (a non-empty directory refused);
//   - the memory target (--memory-target, else 95% of the cgroup limit or RAM) bounding the
//     read-ahead windows, plus a modelled overhead (memory.go, buffers.go);
//   - daemonising without --foreground (daemon.go), logs (logging.go), signals and the
//     unmount on exit (session.go), the FUSE session's ACL (acl.go);
//   - the file system semantics of mount-s3 for general purpose buckets (fs.go, file.go):
//     listing, lookups, ranged reads, sequential writes of new files uploaded with one
//     PutObject on close/fsync, --allow-overwrite with O_TRUNC, --allow-delete, local
//     mkdir/rmdir, rename unsupported (ENOSYS), --prefix, --uid/--gid/--dir-mode/--file-mode,
//     --metadata-ttl and --negative-metadata-ttl as kernel cache lifetimes.
//
// Deliberate choices where mount-s3's behaviour is unspecified or not reproducible: chmod and
// chown succeed without effect; changing times works only on files being written (else
// EPERM); FUSE interrupts are ignored; a new file is buffered whole in memory (no multipart
// upload, outside the memory budget); no data cache, no S3 Express semantics, no OTLP.
//
// One test hook, not a behaviour of mount-s3 (grow.go): reading an object named
// .s3csi-standin-grow-<MiB> makes the stand-in take that much more memory, so that memory
// limits can be exercised on real cgroups.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// version is what --version prints: an official build prints exactly "mount-s3 1.24.0"
// (awslabs/mountpoint-s3@58817cab2:mountpoint-s3/src/build_info.rs, FULL_VERSION).
const version = "mount-s3 1.24.0"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status (awslabs/mountpoint-s3@58817cab2:
// mountpoint-s3/src/run.rs, run).
func run(args []string, stdout, stderr io.Writer) int {
	defaultAction(syscall.SIGUSR1) // mount-s3 handles no SIGUSR1: it ends the process
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
		return daemonChild(o, fd)
	}
	if !o.Foreground {
		return daemonize(args, o, stdout, stderr)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	logFile := ""
	if o.LogDirectory != "" {
		logFile = logFileName(o.LogDirectory)
	}
	log, err := newLogger(o, stdout, logFile)
	if err != nil {
		return fail(err)
	}
	if err := writePidFile(); err != nil {
		return fail(err)
	}
	m, err := mount(o, log, stderr)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s is mounted at %s\n", describeBucket(o), o.MountPoint)
	return serve(m, log, func() {})
}

// describeBucket is mount-s3's human-readable name of what is mounted.
func describeBucket(o *Options) string {
	if o.Prefix != "" {
		return fmt.Sprintf("prefix %s of bucket %s", o.Prefix, o.Bucket)
	}
	return "bucket " + o.Bucket
}

// writePidFile writes this process's pid to UNSTABLE_MOUNTPOINT_PID_FILE, before mounting
// (run.rs, create_pid_file).
func writePidFile() error {
	if p := os.Getenv("UNSTABLE_MOUNTPOINT_PID_FILE"); p != "" {
		if err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return chainError{"failed to write PID to file", rustIOErr(err)}
		}
	}
	return nil
}

// ttls turns the TTL options into kernel cache lifetimes (files, directories, negative
// entries). "minimal" (the default, and "--metadata-ttl 0") caches files not at all and
// directories for 1s; with --cache the default is 60s; "indefinite" is 100 years; the
// negative TTL defaults to the metadata TTL except that "minimal" disables negative caching;
// "--negative-metadata-ttl 0" is a zero TTL.
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
	if m.zero {
		m = ttl{set: true, minimal: true} // --metadata-ttl 0 is "minimal" (cli.rs, cache_config)
	}
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

// makeCacheDir does what mount-s3 does with --cache at start (CONFORMANCE.md O6;
// awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fs/src/data_cache/cache_directory.rs,
// ManagedCacheDir::new_from_parent_with_cache_key): it removes any directory an earlier run
// left and makes a new, empty one of its own (0700, not recursively) inside the given
// directory, and refuses to start when it cannot. It returns the directory, which the
// session removes when it ends.
func makeCacheDir(parent string) (string, error) {
	sub := filepath.Join(parent, cacheSubdir)
	if err := os.RemoveAll(sub); err != nil {
		return "", chainError{"failed to create cache directory", "cleanup of cache sub-directory failed due to IO error: " + rustIOErr(err), rustIOErr(err)}
	}
	if err := os.Mkdir(sub, 0o700); err != nil && !os.IsExist(err) {
		return "", chainError{"failed to create cache directory", "creation of cache sub-directory failed due to IO error: " + rustIOErr(err), rustIOErr(err)}
	}
	return sub, nil
}

// metadataTTLZeroWarning is mount-s3's warning for "--metadata-ttl 0" (cli.rs, cache_config).
const metadataTTLZeroWarning = "The '--metadata-ttl 0' setting is no longer supported, is now interpreted as 'minimal', and will be removed in a future release. Use '--metadata-ttl minimal' instead"

// mount runs mount-s3's start-up sequence (run.rs, mount): mount point checks, SSE, the memory
// target and part sizes, the S3 client and its ListObjectsV2 probe, the cache directory, the
// FUSE mount; then it installs the signal handlers. Errors carry mount-s3's message text.
func mount(o *Options, log *logger, stderr io.Writer) (*mounted, error) {
	log.printf("mount-s3 %s", strings.TrimPrefix(version, "mount-s3 "))
	if err := checkMountPoint(o); err != nil {
		return nil, err
	}
	if o.SSEKMSKeyID != "" && o.SSE == "AES256" {
		return nil, fmt.Errorf("--sse-kms-key-id can not be used with --sse AES256")
	}
	t := decideMemoryTarget(o, hostPaths, os.Getpid())
	log.printf("memory target %d MiB (%s); data-buffer budget %d MiB", t.bytes/mib, t.source, budgetFor(t.bytes)/mib)
	parts, err := validateParts(o, t, log)
	if err != nil {
		return nil, err
	}
	client, region, err := newS3Client(context.Background(), o, parts)
	if err != nil {
		return nil, wrap("Failed to create S3 client", err)
	}
	st := &s3Store{c: client, bucket: o.Bucket, o: o}
	if err := st.checkBucket(context.Background(), region); err != nil {
		return nil, err
	}
	if o.MetadataTTL.zero {
		log.printf("WARN %s", metadataTTLZeroWarning)
		if !o.Foreground {
			fmt.Fprintf(stderr, "warning: %s\n", metadataTTLZeroWarning)
		}
	}
	cacheDir := ""
	if o.Cache != "" {
		if cacheDir, err = makeCacheDir(o.Cache); err != nil {
			return nil, err
		}
	}
	cfg := fsConfig{
		prefix: o.Prefix, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), dirMode: 0o755, fileMode: 0o644,
		readOnly: o.ReadOnly, allowDelete: o.AllowDelete, allowOverwrite: o.AllowOverwrite,
		mem: newMemLimiter(t.bytes), writeCap: writeCapFor(t.bytes, parts),
	}
	if !o.ReadOnly {
		log.printf("max files concurrently open for write: %d (memory target %d MiB, write part size %d MiB)", cfg.writeCap, t.bytes/mib, parts.write/mib)
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
	m, err := mountFS(o, newRoot(st, cfg, log), neg, stderr)
	if err != nil {
		if cacheDir != "" {
			_ = os.RemoveAll(cacheDir)
		}
		return nil, wrap("Failed to create FUSE session", err)
	}
	m.cacheDir, m.sigs = cacheDir, notifySignals()
	log.printf("successfully mounted %s at %s (region %s)", describeBucket(o), o.MountPoint, region)
	return m, nil
}
