package main

import "github.com/hanwen/go-fuse/v2/fuse"

// sessionACL is who may use the mount, as mount-s3 configures its FUSE session (fuser's
// SessionACL): the session owner (mount-s3's effective uid) only by default, root and the owner
// with --allow-root, everyone with --allow-other (CONFORMANCE.md, rows A1-A4).
type sessionACL int

const (
	aclOwner sessionACL = iota
	aclRootAndOwner
	aclAll
)

func aclOf(o *Options) sessionACL {
	switch {
	case o.AllowOther:
		return aclAll
	case o.AllowRoot:
		return aclRootAndOwner
	}
	return aclOwner
}

// aclFS refuses with EACCES the requests of callers the session ACL leaves out, as fuser's
// dispatch does (awslabs/mountpoint-s3@58817cab2:mountpoint-s3-fuser/src/request.rs,
// dispatch_req): every operation but those the kernel may send without the caller's uid
// (init, destroy, read, readdir, readdirplus, forget, batch forget, write, fsync, fsyncdir,
// release, releasedir). The kernel's own check (allow_other) comes first; this one
// also applies to a mount made by someone else and handed over as /dev/fd/N.
type aclFS struct {
	fuse.RawFileSystem
	acl   sessionACL
	owner uint32
}

// gate answers EACCES to callers the ACL leaves out, and passes the rest on.
func (a *aclFS) gate(h *fuse.InHeader, pass func() fuse.Status) fuse.Status {
	switch {
	case a.acl == aclAll, h.Uid == a.owner, a.acl == aclRootAndOwner && h.Uid == 0:
		return pass()
	}
	return fuse.EACCES
}

func (a *aclFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Lookup(c, h, name, out) })
}

func (a *aclFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.GetAttr(c, in, out) })
}

func (a *aclFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.SetAttr(c, in, out) })
}

func (a *aclFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Access(c, in) })
}

func (a *aclFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Open(c, in, out) })
}

func (a *aclFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.OpenDir(c, in, out) })
}

func (a *aclFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Create(c, in, name, out) })
}

func (a *aclFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Mknod(c, in, name, out) })
}

func (a *aclFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Mkdir(c, in, name, out) })
}

func (a *aclFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Unlink(c, h, name) })
}

func (a *aclFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Rmdir(c, h, name) })
}

func (a *aclFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Rename(c, in, oldName, newName) })
}

func (a *aclFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Flush(c, in) })
}

func (a *aclFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.StatFs(c, h, out) })
}

func (a *aclFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Link(c, in, name, out) })
}

func (a *aclFS) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.Symlink(c, h, to, name, out) })
}

func (a *aclFS) Readlink(c <-chan struct{}, h *fuse.InHeader) (out []byte, st fuse.Status) {
	st = a.gate(h, func() fuse.Status { out, st = a.RawFileSystem.Readlink(c, h); return st })
	return out, st
}

func (a *aclFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (n uint32, st fuse.Status) {
	st = a.gate(h, func() fuse.Status { n, st = a.RawFileSystem.GetXAttr(c, h, attr, dest); return st })
	return n, st
}

func (a *aclFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (n uint32, st fuse.Status) {
	st = a.gate(h, func() fuse.Status { n, st = a.RawFileSystem.ListXAttr(c, h, dest); return st })
	return n, st
}

func (a *aclFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.SetXAttr(c, in, attr, data) })
}

func (a *aclFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return a.gate(h, func() fuse.Status { return a.RawFileSystem.RemoveXAttr(c, h, attr) })
}

func (a *aclFS) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Tmpfile(c, in, out) })
}

func (a *aclFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Lseek(c, in, out) })
}

func (a *aclFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.GetLk(c, in, out) })
}

func (a *aclFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.SetLk(c, in) })
}

func (a *aclFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.SetLkw(c, in) })
}

func (a *aclFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (n uint32, st fuse.Status) {
	st = a.gate(&in.InHeader, func() fuse.Status { n, st = a.RawFileSystem.CopyFileRange(c, in); return st })
	return n, st
}

func (a *aclFS) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Ioctl(c, in, inbuf, out, outbuf) })
}

func (a *aclFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Fallocate(c, in) })
}

func (a *aclFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return a.gate(&in.InHeader, func() fuse.Status { return a.RawFileSystem.Statx(c, in, out) })
}
