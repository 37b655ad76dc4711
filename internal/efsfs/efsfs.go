//go:build linux

// Package efsfs is a test-support FUSE file system: a loopback over a local
// directory that adds a network file system's latency to every operation
// that reaches it and can inject faults. It stands in for EFS (NFS) in the
// datadir tests and benchmarks: every lookup, getattr, create, link, fsync
// that the kernel's cache cannot answer costs a round trip, as on NFS.
//
// Mounting needs root (mount(2) directly, no fusermount) and /dev/fuse.
package efsfs

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Profile is the latency added to each operation that reaches the file
// system, and how long the kernel may cache what it answered.
type Profile struct {
	Meta  time.Duration // per metadata operation: lookup, getattr, create, link, mkdir, readdir, ...
	Fsync time.Duration // per fsync of a file or directory
	Data  time.Duration // per read, write or copy_file_range call
	// Cache is how long the kernel caches names and attributes, as an NFS
	// client's attribute cache does (Linux NFS: acregmin 3 s, acdirmin
	// 30 s); 0 sends every lookup and getattr to the file system.
	Cache time.Duration
}

// EFS is the default profile: 1 ms per metadata operation and per fsync,
// 0.3 ms per read or write (EFS in one availability zone: about 1 ms per
// round trip), names and attributes cached for 1 s (less than NFS's
// minimum, so pessimistic).
var EFS = Profile{Meta: time.Millisecond, Fsync: time.Millisecond, Data: 300 * time.Microsecond, Cache: time.Second}

// Op names an operation kind, for counting and for faults.
type Op string

// Operations that a fault can name. OpWrite covers write and
// copy_file_range.
const (
	OpLookup  Op = "lookup"
	OpGetattr Op = "getattr"
	OpSetattr Op = "setattr"
	OpCreate  Op = "create"
	OpMkdir   Op = "mkdir"
	OpMknod   Op = "mknod"
	OpUnlink  Op = "unlink"
	OpRmdir   Op = "rmdir"
	OpRename  Op = "rename"
	OpLink    Op = "link"
	OpSymlink Op = "symlink"
	OpOpen    Op = "open"
	OpRead    Op = "read"
	OpWrite   Op = "write"
	OpFsync   Op = "fsync"
	OpReaddir Op = "readdir"
	OpXattr   Op = "xattr"
	OpOther   Op = "other"
)

// writeOps are the operations that allocate space or change the tree;
// a fault with no Ops applies to these. Unlink and rmdir free space and
// are left working, so that a failed preparation can clean up.
var writeOps = []Op{OpCreate, OpMkdir, OpMknod, OpLink, OpSymlink, OpRename, OpWrite, OpSetattr, OpXattr}

// Fault makes operations fail with Errno once AfterOps matching operations
// have succeeded, or AfterBytes bytes have been written (whichever is set
// and comes first; neither set: at once). Ops lists the operations it
// applies to; empty means those that allocate or change the tree (not
// unlink and rmdir).
type Fault struct {
	Errno      syscall.Errno
	Ops        []Op
	AfterOps   int64
	AfterBytes int64
}

// FS is a mounted latency file system.
type FS struct {
	Dir     string // the mount point
	Backing string // the directory it loops back to

	server  *fuse.Server
	profile atomic.Pointer[Profile]

	mu       sync.Mutex
	fault    *Fault
	faultOps int64 // matching operations since the fault was set
	faultB   int64 // bytes written since the fault was set
	hang     chan struct{}
	hung     chan struct{} // closed when an fsync starts hanging
	hangAll  chan struct{} // set by HangAll: every operation blocks
	hungAll  chan struct{} // closed when the first operation blocks

	counts sync.Map // Op -> *atomic.Int64
}

// Mount mounts a loopback of backing at mountpoint with profile p.
func Mount(backing, mountpoint string, p Profile) (*FS, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	cache := p.Cache
	nodeFS := fs.NewNodeFS(root, &fs.Options{EntryTimeout: &cache, AttrTimeout: &cache})
	f := &FS{Dir: mountpoint, Backing: backing}
	f.profile.Store(&p)
	srv, err := fuse.NewServer(&rawFS{RawFileSystem: nodeFS, fs: f}, mountpoint, &fuse.MountOptions{
		DirectMount:       true,
		DirectMountStrict: true,
		// As a root process it would allow anything: let the kernel
		// check permissions, and let other users (tests run as 65534) in.
		AllowOther: true,
		Options:    []string{"default_permissions"},
		FsName:     "efsfs:" + backing,
		Name:       "efsfs",
		// Up to this many reads and writes in flight; the default 12
		// would serialise parallel copies more than NFS does.
		MaxBackground: 64,
		// Passthrough would send reads and writes straight to the backing
		// file, past the latency.
		DisabledCapabilities: fuse.CAP_PASSTHROUGH,
	})
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, err
	}
	f.server = srv
	return f, nil
}

// Unmount releases a hanging fsync, if any, and unmounts.
func (f *FS) Unmount() error {
	f.Release()
	var err error
	for range 50 {
		if err = f.server.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // busy: a test's files still open
	}
	return err
}

// SetProfile changes the latency from the next operation on.
func (f *FS) SetProfile(p Profile) { f.profile.Store(&p) }

// Inject sets the fault (replacing any), counting from now.
func (f *FS) Inject(fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := fault
	if len(fl.Ops) == 0 {
		fl.Ops = writeOps
	}
	f.fault, f.faultOps, f.faultB = &fl, 0, 0
}

// Clear removes the fault.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = nil
}

// HangFsync makes every fsync from now on block until Release (or the
// caller's interruption). The returned channel is closed when the first one
// blocks.
func (f *FS) HangFsync() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang == nil {
		f.hang, f.hung = make(chan struct{}), make(chan struct{})
	}
	return f.hung
}

// HangAll makes every operation from now on block until Release, as a
// file system whose server stopped answering (EFS, NFS). An operation is
// given up only when its caller is killed (the kernel then interrupts it),
// as NFS gives up a hung call on SIGKILL. The returned channel is closed
// when the first one blocks.
func (f *FS) HangAll() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hangAll == nil {
		f.hangAll, f.hungAll = make(chan struct{}), make(chan struct{})
	}
	return f.hungAll
}

// Release lets hanging operations go on and stops hanging new ones.
func (f *FS) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang != nil {
		close(f.hang)
		f.hang, f.hung = nil, nil
	}
	if f.hangAll != nil {
		close(f.hangAll)
		f.hangAll, f.hungAll = nil, nil
	}
}

// Count returns how many operations of kind op reached the file system.
func (f *FS) Count(op Op) int64 {
	if c, ok := f.counts.Load(op); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// Counts returns every non-zero count, by operation.
func (f *FS) Counts() map[Op]int64 {
	m := map[Op]int64{}
	f.counts.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 0 {
			m[k.(Op)] = n
		}
		return true
	})
	return m
}

// ResetCounts sets every count to zero.
func (f *FS) ResetCounts() {
	f.counts.Range(func(k, v any) bool { v.(*atomic.Int64).Store(0); return true })
}

func (f *FS) count(op Op) {
	c, ok := f.counts.Load(op)
	if !ok {
		c, _ = f.counts.LoadOrStore(op, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// begin accounts for one operation: it waits the latency, then says whether
// it fails (a fuse.Status other than OK). bytes is what a write writes.
func (f *FS) begin(cancel <-chan struct{}, op Op, bytes int64) fuse.Status {
	f.count(op)
	p := f.profile.Load()
	d := p.Meta
	switch op {
	case OpRead, OpWrite:
		d = p.Data
	case OpFsync:
		d = p.Fsync
	}
	if d > 0 {
		time.Sleep(d)
	}
	f.mu.Lock()
	hang, hung := f.hang, f.hung
	all := f.hangAll != nil
	if all {
		hang, hung = f.hangAll, f.hungAll
	}
	var fail syscall.Errno
	if fl := f.fault; fl != nil && slices.Contains(fl.Ops, op) {
		over := fl.AfterOps == 0 && fl.AfterBytes == 0 ||
			fl.AfterOps > 0 && f.faultOps >= fl.AfterOps ||
			fl.AfterBytes > 0 && f.faultB+bytes > fl.AfterBytes
		if over {
			fail = fl.Errno
		} else {
			f.faultOps++
			f.faultB += bytes
		}
	}
	f.mu.Unlock()
	if fail != 0 {
		return fuse.Status(fail)
	}
	if all || op == OpFsync && hang != nil {
		select {
		case <-hung:
		default:
			close(hung)
		}
		select {
		case <-hang:
		case <-cancel:
			return fuse.EINTR
		}
	}
	return fuse.OK
}

// rawFS wraps the loopback's raw file system, operation by operation.
type rawFS struct {
	fuse.RawFileSystem
	fs *FS
}

func (r *rawFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if s := r.fs.begin(c, OpLookup, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Lookup(c, h, name, out)
}

func (r *rawFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if s := r.fs.begin(c, OpGetattr, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.GetAttr(c, in, out)
}

func (r *rawFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if s := r.fs.begin(c, OpGetattr, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Statx(c, in, out)
}

func (r *rawFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if s := r.fs.begin(c, OpSetattr, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.SetAttr(c, in, out)
}

func (r *rawFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := r.fs.begin(c, OpMknod, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Mknod(c, in, name, out)
}

func (r *rawFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := r.fs.begin(c, OpMkdir, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Mkdir(c, in, name, out)
}

func (r *rawFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if s := r.fs.begin(c, OpUnlink, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Unlink(c, h, name)
}

func (r *rawFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if s := r.fs.begin(c, OpRmdir, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Rmdir(c, h, name)
}

func (r *rawFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if s := r.fs.begin(c, OpRename, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Rename(c, in, oldName, newName)
}

func (r *rawFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := r.fs.begin(c, OpLink, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Link(c, in, name, out)
}

func (r *rawFS) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	if s := r.fs.begin(c, OpSymlink, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Symlink(c, h, to, name, out)
}

func (r *rawFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if s := r.fs.begin(c, OpOther, 0); !s.Ok() {
		return nil, s
	}
	return r.RawFileSystem.Readlink(c, h)
}

func (r *rawFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if s := r.fs.begin(c, OpOther, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Access(c, in)
}

func (r *rawFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if s := r.fs.begin(c, OpXattr, 0); !s.Ok() {
		return 0, s
	}
	return r.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (r *rawFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if s := r.fs.begin(c, OpXattr, 0); !s.Ok() {
		return 0, s
	}
	return r.RawFileSystem.ListXAttr(c, h, dest)
}

func (r *rawFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if s := r.fs.begin(c, OpXattr, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (r *rawFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if s := r.fs.begin(c, OpXattr, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (r *rawFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if s := r.fs.begin(c, OpCreate, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Create(c, in, name, out)
}

func (r *rawFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if s := r.fs.begin(c, OpOpen, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Open(c, in, out)
}

func (r *rawFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if s := r.fs.begin(c, OpRead, 0); !s.Ok() {
		return nil, s
	}
	return r.RawFileSystem.Read(c, in, buf)
}

func (r *rawFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if s := r.fs.begin(c, OpOther, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Lseek(c, in, out)
}

func (r *rawFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if s := r.fs.begin(c, OpWrite, int64(len(data))); !s.Ok() {
		return 0, s
	}
	return r.RawFileSystem.Write(c, in, data)
}

func (r *rawFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	if s := r.fs.begin(c, OpWrite, n); !s.Ok() {
		return 0, s
	}
	return r.RawFileSystem.Writev(c, in, data)
}

func (r *rawFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if s := r.fs.begin(c, OpWrite, int64(in.Len)); !s.Ok() {
		return 0, s
	}
	return r.RawFileSystem.CopyFileRange(c, in)
}

func (r *rawFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if s := r.fs.begin(c, OpOther, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Flush(c, in)
}

func (r *rawFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if s := r.fs.begin(c, OpFsync, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Fsync(c, in)
}

func (r *rawFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if s := r.fs.begin(c, OpWrite, int64(in.Length)); !s.Ok() {
		return s
	}
	return r.RawFileSystem.Fallocate(c, in)
}

func (r *rawFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if s := r.fs.begin(c, OpOpen, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.OpenDir(c, in, out)
}

func (r *rawFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if s := r.fs.begin(c, OpReaddir, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.ReadDir(c, in, out)
}

func (r *rawFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if s := r.fs.begin(c, OpReaddir, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.ReadDirPlus(c, in, out)
}

func (r *rawFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if s := r.fs.begin(c, OpFsync, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.FsyncDir(c, in)
}

func (r *rawFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if s := r.fs.begin(c, OpOther, 0); !s.Ok() {
		return s
	}
	return r.RawFileSystem.StatFs(c, h, out)
}

// Available reports why a FUSE mount cannot work here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("efsfs: mounting needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("efsfs: %w", err)
	}
	f.Close()
	return nil
}
