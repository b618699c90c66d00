// Package slowfs is a FUSE file system for tests whose operations can be held: a loopback of
// a directory (go-fuse's) in front of which each chosen operation waits until the test
// releases it, as a hung network or FUSE server would keep a caller waiting in the kernel.
// It mounts with mount(2) itself (go-fuse's DirectMount: root, /dev/fuse, no fusermount).
package slowfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Op is a FUSE operation that can be held.
type Op string

// The operations that can be held. Getattr holds FUSE_STATX too; none is held on the file
// system's root (its mount point stays stat-able: a sandbox binding it looks at it first).
const (
	Lookup  Op = "lookup"
	Getattr Op = "getattr"
	Open    Op = "open" // open and create
	Read    Op = "read"
	Write   Op = "write" // write, setattr (truncate)
	Unlink  Op = "unlink"
)

// Waiting is an operation held now, and who asked: the thread id (in the mounter's pid
// namespace) and its process.
type Waiting struct {
	Op        Op
	Name      string // the name looked up, created or unlinked ("" for other operations)
	TID, TGID uint32
}

func (w Waiting) String() string {
	return fmt.Sprintf("%s %q by thread %d of process %d", w.Op, w.Name, w.TID, w.TGID)
}

// FS is a mounted slow file system.
type FS struct {
	Dir string // the mount point

	mu      sync.Mutex
	hold    map[Op]bool
	release chan struct{} // closed by Release: what waits goes on
	waiting map[*Waiting]bool
	served  int
}

// Mount mounts a slow file system over an empty backing directory at a new directory under
// parent (world-writable, allow_other: the tool's uid uses it), and unmounts it when the
// test ends (everything held is released first). The kernel caches nothing (entries and
// attributes time out at once): every access asks the file system.
func Mount(t testing.TB, parent string) *FS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("slowfs: mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("slowfs: no /dev/fuse: %v", err)
	}
	backing, err := os.MkdirTemp(parent, "berm-slowfs-backing-")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "berm-slowfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(backing); os.Remove(dir) })
	for _, d := range []string{backing, dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	var zero time.Duration
	raw := fs.NewNodeFS(root, &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero})
	f := &FS{Dir: dir, hold: map[Op]bool{}, release: make(chan struct{}), waiting: map[*Waiting]bool{}}
	srv, err := fuse.NewServer(&gate{RawFileSystem: raw, fs: f}, dir, &fuse.MountOptions{
		DirectMount: true, DirectMountStrict: true, AllowOther: true, Name: "slowfs", FsName: "berm-slowfs",
		MaxBackground: 64,
	})
	if err != nil {
		t.Fatalf("slowfs: mount: %v", err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatalf("slowfs: mount: %v", err)
	}
	t.Cleanup(func() {
		f.Release()
		if err := srv.Unmount(); err != nil {
			t.Logf("slowfs: unmount %s: %v; detaching it", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return f
}

// Hold makes every later operation of these kinds wait until Release (operations on the
// root excepted).
func (f *FS) Hold(ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range ops {
		f.hold[o] = true
	}
}

// Release lets everything held go on, and holds nothing any more.
func (f *FS) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = map[Op]bool{}
	close(f.release)
	f.release = make(chan struct{})
}

// Waiting lists the operations held now.
func (f *FS) Waiting() []Waiting {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Waiting
	for w := range f.waiting {
		out = append(out, *w)
	}
	return out
}

// Served counts the operations answered (held or not).
func (f *FS) Served() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

// WaitHeld waits until some operation is held, for at most d.
func (f *FS) WaitHeld(d time.Duration) ([]Waiting, error) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if w := f.Waiting(); len(w) > 0 {
			return w, nil
		}
	}
	return nil, errors.New("slowfs: nothing held")
}

// gate holds an operation while its kind is held. It ignores the kernel's interrupt (cancel):
// a hung server answers nothing.
func (f *FS) gate(op Op, h *fuse.InHeader, name string) {
	f.mu.Lock()
	f.served++
	if !f.hold[op] || h.NodeId == fuse.FUSE_ROOT_ID && op != Lookup && op != Unlink && op != Open {
		f.mu.Unlock()
		return
	}
	w := &Waiting{Op: op, Name: name, TID: h.Caller.Pid, TGID: tgid(h.Caller.Pid)}
	f.waiting[w] = true
	rel := f.release
	f.mu.Unlock()
	<-rel
	f.mu.Lock()
	delete(f.waiting, w)
	f.mu.Unlock()
}

func tgid(tid uint32) uint32 {
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(tid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			var n uint32
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	return 0
}

type gate struct {
	fuse.RawFileSystem
	fs *FS
}

func (g *gate) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	g.fs.gate(Lookup, h, name)
	return g.RawFileSystem.Lookup(c, h, name, out)
}

func (g *gate) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.fs.gate(Getattr, &in.InHeader, "")
	return g.RawFileSystem.GetAttr(c, in, out)
}

func (g *gate) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	g.fs.gate(Getattr, &in.InHeader, "")
	return g.RawFileSystem.Statx(c, in, out)
}

func (g *gate) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	g.fs.gate(Write, &in.InHeader, "")
	return g.RawFileSystem.SetAttr(c, in, out)
}

func (g *gate) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g.fs.gate(Open, &in.InHeader, "")
	return g.RawFileSystem.Open(c, in, out)
}

func (g *gate) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	g.fs.gate(Open, &in.InHeader, name)
	return g.RawFileSystem.Create(c, in, name, out)
}

func (g *gate) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	g.fs.gate(Read, &in.InHeader, "")
	return g.RawFileSystem.Read(c, in, buf)
}

func (g *gate) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	g.fs.gate(Write, &in.InHeader, "")
	return g.RawFileSystem.Write(c, in, data)
}

func (g *gate) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	g.fs.gate(Unlink, h, name)
	return g.RawFileSystem.Unlink(c, h, name)
}

func (g *gate) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	g.fs.gate(Write, &in.InHeader, "")
	return g.RawFileSystem.Writev(c, in, data)
}
