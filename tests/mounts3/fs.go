package main

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fsConfig is what the file system needs from the command line.
type fsConfig struct {
	prefix                                string // "" or ending in "/"
	uid, gid                              uint32
	dirMode, fileMode                     uint32 // permission bits only
	readOnly, allowDelete, allowOverwrite bool
	fileTTL, dirTTL                       time.Duration // kernel entry/attr cache lifetimes
	// mem bounds the read windows (nil: a limiter for the host's default target is made).
	mem *memLimiter
	// writeCap is how many files may be open for writing at once (mount-s3 1.24's write
	// handle limiter; more opens fail with ENOMEM). Meaningful only with mem set.
	writeCap int
}

// s3fs is the state shared by all nodes of one mount. mu guards localDirs, writing and the
// size/mtime/up fields of every fileNode; it is never held during S3 requests.
type s3fs struct {
	cfg   fsConfig
	st    store
	log   *logger
	start time.Time
	mem   *memLimiter

	mu        sync.Mutex
	localDirs map[string]bool      // full prefixes ("a/b/") made by mkdir and not yet backed by objects
	writing   map[string]*fileNode // full keys of files whose upload is in progress
	writes    int                  // write handles holding a write slot
}

// dirNode is a directory: a common prefix in the bucket, or a local directory made by mkdir.
// key is its full prefix ("" for the root of a whole-bucket mount, else ending in "/").
type dirNode struct {
	fs.Inode
	fsys *s3fs
	key  string
}

// fileNode is an object (or a new file being written). key is its full S3 key.
type fileNode struct {
	fs.Inode
	fsys  *s3fs
	key   string
	size  int64
	mtime time.Time
	up    *upload // non-nil while a write handle is uploading this key
}

var (
	_ fs.NodeLookuper  = (*dirNode)(nil)
	_ fs.NodeReaddirer = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.NodeStatfser  = (*fileNode)(nil)
)

// newRoot returns the root directory of a mount of st under cfg.prefix.
func newRoot(st store, cfg fsConfig, log *logger) *dirNode {
	if cfg.mem == nil {
		t := decideMemoryTarget(&Options{}, hostPaths, os.Getpid())
		cfg.mem, cfg.writeCap = newMemLimiter(t.bytes), writeCapFor(t.bytes, partSizes{read: 8 * mib, write: 8 * mib})
	}
	f := &s3fs{cfg: cfg, st: st, log: log, start: time.Now(), mem: cfg.mem, localDirs: map[string]bool{}, writing: map[string]*fileNode{}}
	return &dirNode{fsys: f, key: cfg.prefix}
}

// ino derives a stable inode number from the kind and key, so repeated lookups of one
// name yield the same inode. 1 is the root.
func ino(kind, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(kind + key))
	if v := h.Sum64(); v > 1 {
		return v
	}
	return 2
}

// validName reports whether a directory entry name can be shown (S3 keys may hold names
// POSIX cannot).
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// tgid maps a FUSE caller pid (a thread id) to its thread-group id, so the flush rule
// compares processes, not threads.
func tgid(ctx context.Context) int {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(c.Pid)) + "/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					return n
				}
			}
		}
	}
	return int(c.Pid)
}

// s3ctx is the context of every S3 request. It is deliberately not the FUSE request's
// context: the Go runtime preempts goroutines with SIGURG, so a Go program blocked in a
// syscall on this mount routinely makes the kernel send FUSE_INTERRUPT, which go-fuse turns
// into a cancelled context; honouring it would fail ordinary reads with EIO. Like mount-s3,
// interrupts are ignored; instead each request is bounded by s3Timeout.
func s3ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s3Timeout)
}

const s3Timeout = 5 * time.Minute

func (f *s3fs) ioErr(op, key string, err error) syscall.Errno {
	f.log.printf("%s %q failed: %s", op, key, describeErr(err))
	return syscall.EIO
}

func (d *dirNode) fill(out *fuse.Attr) {
	c := d.fsys.cfg
	out.Mode = syscall.S_IFDIR | c.dirMode
	out.Nlink = 2
	out.Uid, out.Gid = c.uid, c.gid
	out.Ino = d.StableAttr().Ino
	out.SetTimes(&d.fsys.start, &d.fsys.start, &d.fsys.start)
}

// fill must be called with fsys.mu held.
func (n *fileNode) fill(out *fuse.Attr) {
	c := n.fsys.cfg
	out.Mode = syscall.S_IFREG | c.fileMode
	out.Nlink = 1
	out.Uid, out.Gid = c.uid, c.gid
	out.Ino = n.StableAttr().Ino
	out.Size = uint64(n.size)
	out.Blksize = 4096
	out.SetTimes(&n.mtime, &n.mtime, &n.mtime)
}

func (d *dirNode) childDir(ctx context.Context, key string, out *fuse.EntryOut) *fs.Inode {
	ch := d.NewInode(ctx, &dirNode{fsys: d.fsys, key: key}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino("d", key)})
	ch.Operations().(*dirNode).fill(&out.Attr)
	out.SetEntryTimeout(d.fsys.cfg.dirTTL)
	out.SetAttrTimeout(d.fsys.cfg.dirTTL)
	return ch
}

// childFile attaches the file node for key; info refreshes its metadata unless it is being
// written. Must be called with fsys.mu held.
func (d *dirNode) childFile(ctx context.Context, key string, info *objInfo, out *fuse.EntryOut) (*fs.Inode, *fileNode) {
	ch := d.NewInode(ctx, &fileNode{fsys: d.fsys, key: key}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino("f", key)})
	n := ch.Operations().(*fileNode)
	if info != nil && n.up == nil {
		n.size, n.mtime = info.size, info.mtime
	}
	n.fill(&out.Attr)
	out.SetEntryTimeout(d.fsys.cfg.fileTTL)
	out.SetAttrTimeout(d.fsys.cfg.fileTTL)
	return ch, n
}

// What a key is in the bucket.
const (
	remoteNone = iota
	remoteDir  // some object has key+"/" as a prefix
	remoteFile // an object is named key
)

// resolveRemote asks S3 what key is; a directory shadows an object of the same name.
func (f *s3fs) resolveRemote(key string) (kind int, info objInfo, errno syscall.Errno) {
	sctx, cancel := s3ctx()
	defer cancel()
	l, err := f.st.list(sctx, key+"/", "", 1, "")
	if err != nil {
		return 0, info, f.ioErr("ListObjectsV2", key+"/", err)
	}
	if len(l.objects) > 0 || len(l.prefixes) > 0 {
		return remoteDir, info, 0
	}
	info, err = f.st.head(sctx, key)
	if err == nil {
		return remoteFile, info, 0
	}
	if errors.Is(err, errNotFound) {
		return remoteNone, info, 0
	}
	return 0, info, f.ioErr("HeadObject", key, err)
}

// Lookup resolves name like mount-s3: a file being written here wins, then a directory
// (any key under name/), then an object named exactly name, then a local mkdir directory.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !validName(name) {
		return nil, syscall.ENOENT
	}
	f, key := d.fsys, d.key+name
	f.mu.Lock()
	if n := f.writing[key]; n != nil {
		defer f.mu.Unlock()
		ch, _ := d.childFile(ctx, key, nil, out)
		return ch, 0
	}
	f.mu.Unlock()
	kind, info, errno := f.resolveRemote(key)
	if errno != 0 {
		return nil, errno
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case kind == remoteDir || (kind == remoteNone && f.localDirs[key+"/"]):
		return d.childDir(ctx, key+"/", out), 0
	case kind == remoteFile:
		ch, _ := d.childFile(ctx, key, &info, out)
		return ch, 0
	}
	return nil, syscall.ENOENT
}

// Readdir lists common prefixes as directories and objects as files (all pages), with
// directories shadowing files of the same name, plus local directories and files being
// written. Entries are sorted by name.
func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	f := d.fsys
	modes := map[string]uint32{}
	sctx, cancel := s3ctx()
	defer cancel()
	for token := ""; ; {
		l, err := f.st.list(sctx, d.key, "/", 0, token)
		if err != nil {
			return nil, f.ioErr("ListObjectsV2", d.key, err)
		}
		for _, p := range l.prefixes {
			if name := strings.TrimSuffix(strings.TrimPrefix(p, d.key), "/"); validName(name) {
				modes[name] = syscall.S_IFDIR
			}
		}
		for _, o := range l.objects {
			if name := strings.TrimPrefix(o.key, d.key); validName(name) && modes[name] == 0 {
				modes[name] = syscall.S_IFREG
			}
		}
		if token = l.next; token == "" {
			break
		}
	}
	f.mu.Lock()
	for p := range f.localDirs {
		if name, ok := strings.CutPrefix(p, d.key); ok && validName(strings.TrimSuffix(name, "/")) {
			modes[strings.TrimSuffix(name, "/")] = syscall.S_IFDIR
		}
	}
	for k := range f.writing {
		if name, ok := strings.CutPrefix(k, d.key); ok && validName(name) && modes[name] == 0 {
			modes[name] = syscall.S_IFREG
		}
	}
	f.mu.Unlock()
	entries := make([]fuse.DirEntry, 0, len(modes))
	for name, mode := range modes {
		kind, key := "f", d.key+name
		if mode == syscall.S_IFDIR {
			kind, key = "d", key+"/"
		}
		entries = append(entries, fuse.DirEntry{Name: name, Mode: mode, Ino: ino(kind, key)})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return fs.NewListDirStream(entries), 0
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fill(&out.Attr)
	out.SetTimeout(d.fsys.cfg.dirTTL)
	return 0
}

// Setattr on a directory: chmod/chown are accepted and ignored (modes and owners are fixed
// by --dir-mode/--uid/--gid); changing times or size is EPERM.
func (d *dirNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if in.Valid&(fuse.FATTR_SIZE|fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW) != 0 {
		return syscall.EPERM
	}
	return d.Getattr(ctx, nil, out)
}

// Create starts a new object: the returned write handle accepts only sequential writes.
// The name must not exist in S3 (EEXIST), even if the kernel's cache missed it.
func (d *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f, key := d.fsys, d.key+name
	if f.cfg.readOnly {
		return nil, nil, 0, syscall.EROFS
	}
	if !validName(name) {
		return nil, nil, 0, syscall.EINVAL
	}
	if kind, _, errno := f.resolveRemote(key); errno != 0 {
		return nil, nil, 0, errno
	} else if kind != remoteNone {
		return nil, nil, 0, syscall.EEXIST
	}
	owner := tgid(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writing[key] != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	if errno := f.takeWriteSlot(); errno != 0 {
		return nil, nil, 0, errno
	}
	ch, n := d.childFile(ctx, key, nil, out)
	n.up, n.size, n.mtime = &upload{owner: owner}, 0, time.Now()
	f.writing[key] = n
	n.fill(&out.Attr)
	f.log.debugf("create %q", key)
	return ch, &handle{n: n, up: n.up, slot: true}, 0, 0
}

// Mkdir makes a local directory; it reaches S3 only when a file is written below it.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f, key := d.fsys, d.key+name+"/"
	if f.cfg.readOnly {
		return nil, syscall.EROFS
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writing[d.key+name] != nil {
		return nil, syscall.EEXIST
	}
	f.localDirs[key] = true
	return d.childDir(ctx, key, out), 0
}

// Rmdir removes only an empty local directory. Directories with objects (or local
// children) are ENOTEMPTY; anything else is ENOENT.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	f, key := d.fsys, d.key+name+"/"
	if f.cfg.readOnly {
		return syscall.EROFS
	}
	f.mu.Lock()
	local, busy := f.localDirs[key], false
	for k := range f.writing {
		busy = busy || strings.HasPrefix(k, key)
	}
	for k := range f.localDirs {
		busy = busy || (k != key && strings.HasPrefix(k, key))
	}
	f.mu.Unlock()
	if busy {
		return syscall.ENOTEMPTY
	}
	sctx, cancel := s3ctx()
	defer cancel()
	l, err := f.st.list(sctx, key, "", 1, "")
	if err != nil {
		return f.ioErr("ListObjectsV2", key, err)
	}
	if len(l.objects) > 0 {
		return syscall.ENOTEMPTY
	}
	if !local {
		return syscall.ENOENT
	}
	f.mu.Lock()
	delete(f.localDirs, key)
	f.mu.Unlock()
	return 0
}

// Unlink deletes the object (DeleteObject) when --allow-delete is set; otherwise, and for a
// file still being written, it is EPERM.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	f, key := d.fsys, d.key+name
	if f.cfg.readOnly {
		return syscall.EROFS
	}
	if !f.cfg.allowDelete {
		return syscall.EPERM
	}
	f.mu.Lock()
	writing := f.writing[key] != nil
	f.mu.Unlock()
	if writing {
		return syscall.EPERM
	}
	sctx, cancel := s3ctx()
	defer cancel()
	if err := f.st.del(sctx, key); err != nil {
		return f.ioErr("DeleteObject", key, err)
	}
	f.log.debugf("deleted %q", key)
	return 0
}

// Rename is not supported (as in mount-s3 for general purpose buckets): ENOSYS.
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.ENOSYS
}

// statfs is mount-s3's fixed answer, sent without an S3 request (CONFORMANCE.md F1): total,
// free and available blocks and total and free inodes all u64::MAX/1024, block size 512,
// names up to 255 bytes, fragment size 0 (the kernel reports the block size for it).
func statfs(out *fuse.StatfsOut) syscall.Errno {
	const n = ^uint64(0) / 1024
	*out = fuse.StatfsOut{Blocks: n, Bfree: n, Bavail: n, Files: n, Ffree: n, Bsize: 512, NameLen: 255}
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno  { return statfs(out) }
func (n *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno { return statfs(out) }

func (n *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fsys.mu.Lock()
	defer n.fsys.mu.Unlock()
	n.fill(&out.Attr)
	out.SetTimeout(n.fsys.cfg.fileTTL)
	return 0
}

// Setattr: chmod/chown are accepted and ignored. On a file being written, size changes are
// accepted and ignored (so O_TRUNC/ftruncate of a new file work; a following write at another
// offset fails) and times may change. On other files, changing times or the size is EPERM.
func (n *fileNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if sz, ok := in.GetSize(); ok && n.up == nil && sz != uint64(n.size) {
		return syscall.EPERM
	}
	if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW) != 0 {
		if n.up == nil {
			return syscall.EPERM
		}
		if mt, ok := in.GetMTime(); ok {
			n.mtime = mt
		} else if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			n.mtime = time.Now()
		}
	}
	n.fill(&out.Attr)
	out.SetTimeout(f.cfg.fileTTL)
	return 0
}

// Open: read-only opens read the object. Opening for writing needs --allow-overwrite and
// O_TRUNC and starts a new upload of the key (EPERM otherwise; O_RDWR without them opens
// for reading only). A file being written cannot be opened again (EPERM).
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	owner := tgid(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if n.up != nil {
		return nil, 0, syscall.EPERM
	}
	acc := flags & syscall.O_ACCMODE
	if acc == syscall.O_RDONLY {
		growOnDemand(n.key) // a test hook (grow.go)
		return &handle{n: n}, 0, 0
	}
	if f.cfg.readOnly {
		return nil, 0, syscall.EROFS
	}
	if !f.cfg.allowOverwrite || flags&syscall.O_TRUNC == 0 {
		if acc == syscall.O_RDWR {
			return &handle{n: n}, 0, 0
		}
		return nil, 0, syscall.EPERM
	}
	if errno := f.takeWriteSlot(); errno != 0 {
		return nil, 0, errno
	}
	n.up, n.size, n.mtime = &upload{owner: owner}, 0, time.Now()
	f.writing[n.key] = n
	f.log.debugf("overwrite %q", n.key)
	return &handle{n: n, up: n.up, slot: true}, 0, 0
}

// takeWriteSlot takes one of the mount's write-handle slots, or fails with ENOMEM when all
// are in use, as mount-s3's WriteHandleLimiter::try_acquire does at open (CONFORMANCE.md R6).
// Must be called with f.mu held.
func (f *s3fs) takeWriteSlot() syscall.Errno {
	if f.writes >= f.cfg.writeCap {
		f.log.printf("WARN write handle limit reached (max %d)", f.cfg.writeCap)
		return syscall.ENOMEM
	}
	f.writes++
	return 0
}
