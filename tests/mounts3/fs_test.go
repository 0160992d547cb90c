package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// memStore is an in-memory store with S3 listing semantics; pageSize small forces pagination.
type memStore struct {
	mu       sync.Mutex
	objs     map[string][]byte
	pageSize int
}

func (m *memStore) list(ctx context.Context, prefix, delim string, maxKeys int32, token string) (listing, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objs {
		// token is the last key or common prefix returned: resume after it (and after
		// everything under it, for a prefix).
		past := token == "" || (k > token && (!strings.HasSuffix(token, delim) || delim == "" || !strings.HasPrefix(k, token)))
		if strings.HasPrefix(k, prefix) && past {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	limit := m.pageSize
	if maxKeys > 0 && int(maxKeys) < limit {
		limit = int(maxKeys)
	}
	var l listing
	seen, last := map[string]bool{}, ""
	for _, k := range keys {
		entry, isPrefix := k, false
		if i := strings.Index(k[len(prefix):], delim); delim != "" && i >= 0 {
			entry, isPrefix = k[:len(prefix)+i+1], true
			if seen[entry] {
				continue
			}
		}
		if len(l.objects)+len(l.prefixes) == limit {
			l.next = last
			break
		}
		last = entry
		if isPrefix {
			seen[entry] = true
			l.prefixes = append(l.prefixes, entry)
			continue
		}
		l.objects = append(l.objects, objInfo{key: k, size: int64(len(m.objs[k])), mtime: time.Unix(1700000000, 0)})
	}
	return l, nil
}

func (m *memStore) head(ctx context.Context, key string) (objInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	if !ok {
		return objInfo{}, errNotFound
	}
	return objInfo{key: key, size: int64(len(b)), mtime: time.Unix(1700000000, 0)}, nil
}

func (m *memStore) readInto(ctx context.Context, key string, off int64, dst []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.objs[key]
	if off >= int64(len(b)) {
		return 0, nil
	}
	return copy(dst, b[off:]), nil
}

func (m *memStore) put(ctx context.Context, key string, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = append([]byte(nil), body...)
	return nil
}

func (m *memStore) del(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memStore) object(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[key]
	return b, ok
}

// mountMem mounts st in-process on a temp dir with cfg and returns the directory; the mount
// is removed in cleanup.
func mountMem(t *testing.T, st *memStore, cfg fsConfig) string {
	t.Helper()
	return mountMemNeg(t, st, cfg, 0)
}

// mountMemNeg is mountMem with a kernel negative-entry TTL.
func mountMemNeg(t *testing.T, st *memStore, cfg fsConfig, negTTL time.Duration) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount(2)")
	}
	dir := t.TempDir()
	cfg.dirMode, cfg.fileMode, cfg.dirTTL = 0o755, 0o644, time.Second
	m, err := mountFS(&Options{MountPoint: dir, ReadOnly: cfg.readOnly}, newRoot(st, cfg, &logger{}), negTTL, io.Discard)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	done := m.start()
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("serve loop did not end after unmount")
		}
	})
	return dir
}

func newMem(objs map[string]string) *memStore {
	m := &memStore{objs: map[string][]byte{}, pageSize: 2}
	for k, v := range objs {
		m.objs[k] = []byte(v)
	}
	return m
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func TestFSListingAndLookup(t *testing.T) {
	st := newMem(map[string]string{"a.txt": "A", "dir/x": "X", "dir/y/z": "Z", "blue": "file", "blue/img": "I",
		"marker/": "", "bad//name": "", "zz": "last"})
	dir := mountMem(t, st, fsConfig{})
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name()+map[bool]string{true: "/", false: ""}[e.IsDir()])
	}
	if d := cmp.Diff([]string{"a.txt", "bad/", "blue/", "dir/", "marker/", "zz"}, got); d != "" {
		t.Fatalf("root listing (-want +got):\n%s", d)
	}
	if fi, err := os.Stat(filepath.Join(dir, "blue")); err != nil || !fi.IsDir() {
		t.Fatalf("blue should be a directory shadowing the object: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dir/y/z")); err != nil || string(b) != "Z" {
		t.Fatalf("read dir/y/z = %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "a.txt"))
	if err != nil || fi.Size() != 1 || fi.Mode() != 0o644 {
		t.Fatalf("stat a.txt = %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !os.IsNotExist(err) {
		t.Fatalf("stat nope: %v, want ENOENT", err)
	}
	var sfs unix.Statfs_t
	const n = ^uint64(0) / 1024
	if err := unix.Statfs(dir, &sfs); err != nil || sfs.Blocks != n || sfs.Bfree != n || sfs.Bavail != n ||
		sfs.Files != n || sfs.Ffree != n || sfs.Bsize != 512 || sfs.Namelen != 255 {
		t.Fatalf("statfs = %+v, %v; want every count %d, block size 512, names up to 255 (row F1)", sfs, err, n)
	}
	wantErrno(t, "rename", os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")), syscall.ENOSYS)
}

func TestFSReadRandom(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB
	st := newMem(map[string]string{"big": string(body)})
	dir := mountMem(t, st, fsConfig{})
	f, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{3000000, 17, 1 << 20, 0, int64(len(body)) - 5} {
		buf := make([]byte, 100)
		n, err := f.ReadAt(buf, off)
		want := body[off:min(off+100, int64(len(body)))]
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("ReadAt(%d) = %d bytes %q..., %v; want %q...", off, n, buf[:min(n, 10)], err, want[:10])
		}
	}
	all, err := os.ReadFile(filepath.Join(dir, "big"))
	if err != nil || !bytes.Equal(all, body) {
		t.Fatalf("sequential read: %d bytes, %v", len(all), err)
	}
}

func TestFSWriteRules(t *testing.T) {
	st := newMem(map[string]string{"old": "old"})
	dir := mountMem(t, st, fsConfig{})
	p := filepath.Join(dir, "new")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	_, err = os.Open(p)
	wantErrno(t, "open for read while writing", err, syscall.EPERM)
	if _, err := f.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, ok := st.object("new"); !ok || string(b) != "hello world" {
		t.Fatalf("object after close = %q, %v", b, ok)
	}

	f, err = os.Create(filepath.Join(dir, "random"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte("x"), 10)
	wantErrno(t, "out-of-order write", err, syscall.EINVAL)
	f.Close()
	if _, ok := st.object("random"); ok {
		t.Fatalf("aborted upload must not create an object")
	}

	_, err = os.OpenFile(filepath.Join(dir, "old"), os.O_WRONLY|os.O_TRUNC, 0)
	wantErrno(t, "overwrite without --allow-overwrite", err, syscall.EPERM)
	wantErrno(t, "unlink without --allow-delete", os.Remove(filepath.Join(dir, "old")), syscall.EPERM)
	wantErrno(t, "chtimes on existing file", os.Chtimes(filepath.Join(dir, "old"), time.Now(), time.Now()), syscall.EPERM)
	if err := os.Chmod(filepath.Join(dir, "old"), 0o600); err != nil {
		t.Fatalf("chmod is accepted and ignored: %v", err)
	}

	// touch: empty file, uploaded on release (asynchronously after close).
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := st.object("empty"); !ok; _, ok = st.object("empty") {
		if time.Now().After(deadline) {
			t.Fatal("empty file was not uploaded after release")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFSOverwriteDelete(t *testing.T) {
	st := newMem(map[string]string{"old": "old contents"})
	dir := mountMem(t, st, fsConfig{allowOverwrite: true, allowDelete: true})
	p := filepath.Join(dir, "old")
	_, err := os.OpenFile(p, os.O_WRONLY, 0)
	wantErrno(t, "overwrite without O_TRUNC", err, syscall.EPERM)
	if err := os.WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatalf("overwrite with O_TRUNC: %v", err)
	}
	if b, _ := st.object("old"); string(b) != "new" {
		t.Fatalf("object after overwrite = %q", b)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.object("old"); ok {
		t.Fatal("object still exists after unlink")
	}
}

func TestFSDirectories(t *testing.T) {
	st := newMem(map[string]string{"real/f": "f"})
	dir := mountMem(t, st, fsConfig{prefix: ""})
	if err := os.MkdirAll(filepath.Join(dir, "l1/l2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rmdir of non-empty local dir", os.Remove(filepath.Join(dir, "l1")), syscall.ENOTEMPTY)
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatalf("rmdir empty local dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "l1/l2/f"), []byte("deep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := st.object("l1/l2/f"); string(b) != "deep" {
		t.Fatalf("object l1/l2/f = %q", b)
	}
	wantErrno(t, "rmdir of S3 dir", os.Remove(filepath.Join(dir, "real")), syscall.ENOTEMPTY)
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if d := cmp.Diff([]string{"l1", "real"}, names); d != "" {
		t.Fatalf("listing (-want +got):\n%s", d)
	}
}

func TestFSPrefixAndReadOnly(t *testing.T) {
	st := newMem(map[string]string{"p/in": "in", "out": "out"})
	dir := mountMem(t, st, fsConfig{prefix: "p/", readOnly: true})
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "in" {
		t.Fatalf("prefix listing = %v", ents)
	}
	wantErrno(t, "create on read-only", os.WriteFile(filepath.Join(dir, "x"), nil, 0o644), syscall.EROFS)
	wantErrno(t, "mkdir on read-only", os.Mkdir(filepath.Join(dir, "d"), 0o755), syscall.EROFS)
}

// TestFSCreateChecksS3 covers a kernel that still caches "no such file" (negative TTL) while
// another client created the object: create must fail with EEXIST, not overwrite it.
func TestFSCreateChecksS3(t *testing.T) {
	st := newMem(nil)
	dir := mountMemNeg(t, st, fsConfig{}, time.Minute)
	p := filepath.Join(dir, "late")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat: %v", err)
	}
	if err := st.put(context.Background(), "late", []byte("other client")); err != nil {
		t.Fatal(err)
	}
	_, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	wantErrno(t, "create over a remote object", err, syscall.EEXIST)
	if b, _ := st.object("late"); string(b) != "other client" {
		t.Fatalf("object = %q", b)
	}
}

// TestGrowOnDemand: the test hook takes memory only for its own key names, within its bound.
func TestGrowOnDemand(t *testing.T) {
	grownMu.Lock()
	grown = nil
	grownMu.Unlock()
	for _, key := range []string{"data/file", "data/.s3csi-standin-grow-x", "data/.s3csi-standin-grow-0", "data/.s3csi-standin-grow-5000", "x.s3csi-standin-grow-2"} {
		growOnDemand(key)
	}
	growOnDemand("dir/.s3csi-standin-grow-3")
	grownMu.Lock()
	defer grownMu.Unlock()
	if len(grown) != 3 {
		t.Errorf("grew %d MiB, want 3 (only the hook's names, within its bound)", len(grown))
	}
}
