package lsm

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/testenv/testutil"
)

const racerName = "racer"

// racerArg is what the racer child does: n unlinks in Dir through a buffer another thread
// rewrites.
type racerArg struct {
	Dir string
	N   int
}

// spins keeps the flipping thread busy between its writes (a package variable, so that the
// loop is not optimized away).
var spins atomic.Uint64

// racer is the hostile tool forging its trail (sandboxer's racer.c, in Go: the VM has no C
// compiler): a thread rewrites a path buffer between "d37/harmless" and "precious" while the
// main thread unlinks through it. Only precious exists (recreated before each unlink; d37 is
// an empty directory), so every unlink that works removed precious, whatever the tool's
// memory said. It reports how many worked.
func racer(a racerArg) int {
	if err := os.Chdir(a.Dir); err != nil {
		return -1
	}
	buf := make([]byte, 32)
	copy(buf, "precious\x00")
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for !stop.Load() {
			copy(buf, "d37/harmless\x00")
			for i := 0; i < 300; i++ {
				spins.Add(1)
			}
			copy(buf, "precious\x00\x00\x00\x00\x00")
			for i := 0; i < 300; i++ {
				spins.Add(1)
			}
		}
	}()
	runtime.LockOSThread()
	ok := 0
	for i := 0; i < a.N; i++ {
		fd, err := unix.Open("precious", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		if _, _, e := unix.Syscall(unix.SYS_UNLINK, uintptr(unsafe.Pointer(&buf[0])), 0, 0); e == 0 {
			ok++
		}
	}
	stop.Store(true)
	wg.Wait()
	return ok
}

// Where BPF LSM is active, a forged path is caught by what the kernel saw, not only by
// luck: the racer's unlinks that removed precious while its memory said d37/harmless are
// recorded as the unlink of precious (the path_unlink hook's dentry, walked up to the root,
// with its device and inode), the tool's path kept beside it and flagged as naming another
// entry (path_forged), which the escape-path-race rule alerts on. Without the hook's view
// the record names d37/harmless (TestForgedUnlinkPathsAreCaught in sandboxer catches only
// the rewrites still visible at the syscall's exit).
func TestVMKernelViewOfForgedPaths(t *testing.T) {
	requireVM(t)
	if runtime.NumCPU() < 2 {
		t.Fatalf("the race needs two CPUs in the VM, it has %d", runtime.NumCPU())
	}
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, "d37"), 0o755))
	precious := filepath.Join(dir, "precious")

	tr, err := tracer.New(tracer.DefaultConfig)
	if err != nil {
		t.Fatalf("tracer: %v", err)
	}
	defer tr.Close()
	l, err := New(tr.Shared())
	if err != nil {
		t.Fatalf("lsm: %v", err)
	}
	defer l.Close()
	rd, err := ringbuf.NewReader(tr.Events())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	cg := filepath.Join("/sys/fs/cgroup", "berm-lsm-forged")
	must(t, os.Mkdir(cg, 0o755))
	defer os.Remove(cg)
	var st unix.Stat_t
	must(t, unix.Stat(cg, &st))
	cgid := st.Ino
	cgfd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(cgfd)
	const slot = 8
	must(t, tr.Register(cgid, tracer.CallConfig{Slot: slot}))
	defer tr.Unregister(cgid)
	must(t, l.SetPolicy(cgid, Rule{ID: 1, Path: "/", Rights: Read | Write | Exec | Remove}))
	defer l.Remove(cgid)

	var forged, flagged, worked, removed int
	for round := 0; round < 5 && forged == 0; round++ {
		// The ring is read while the racer runs: a round's records outgrow it. The reader's
		// deadline is set by its own goroutine (Read holds the reader's lock while it waits):
		// it wakes to see whether the racer ended, and stops once the ring is empty after that.
		var unlinks []*event.Syscall
		done := make(chan struct{})
		var ended atomic.Bool
		var readErr error
		go func() {
			defer close(done)
			for {
				rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
				rec, err := rd.Read()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					if ended.Load() && rd.AvailableBytes() == 0 {
						return
					}
					continue
				}
				if err != nil {
					readErr = err
					return
				}
				h, ok := wire.Header(rec.RawSample)
				if !ok || h.CgroupId != cgid || h.Op != uint16(bpf.WireBermOpBERM_OP_SYSCALL_PATH) {
					continue
				}
				var ev event.Event
				if err := wire.Decode(rec.RawSample, &ev); err != nil {
					readErr = err
					return
				}
				if sc := ev.Syscall; sc != nil && strings.HasPrefix(sc.Name, "unlink") && sc.Result == 0 {
					unlinks = append(unlinks, sc)
				}
			}
		}()
		cmd := testutil.JSONCommand(t, racerName, racerArg{Dir: dir, N: 2000})
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
		var n int
		ee := testutil.RunJSON(t, cmd, &n)
		ended.Store(true)
		<-done
		if ee != nil {
			t.Fatalf("racer: %v\nstderr: %s", ee, ee.Stderr)
		}
		if readErr != nil {
			t.Fatalf("read events: %v", readErr)
		}
		if n <= 0 {
			t.Fatalf("the racer removed precious %d times: the test shows nothing", n)
		}
		removed += n
		roundForged, wrong := 0, 0
		for _, sc := range unlinks {
			worked++
			if sc.Path != precious || sc.PathSource != "kernel" || sc.Ino == 0 || sc.Dev == "" {
				if wrong++; wrong <= 5 || sc.Path != "precious" {
					t.Errorf("an unlink that removed precious is recorded as %q (source %q, dev %q ino %d, the tool's memory said %q): want the kernel's %s",
						sc.Path, sc.PathSource, sc.Dev, sc.Ino, sc.ToolPath, precious)
				}
				continue
			}
			if filepath.Base(sc.ToolPath) != "precious" {
				roundForged++
				if !sc.PathForged {
					t.Errorf("the tool's memory said %q while the kernel removed %s, yet path_forged is not set", sc.ToolPath, sc.Path)
				}
			} else if sc.PathForged {
				t.Errorf("the tool's memory said %q, the kernel removed %s: not forged, yet path_forged is set", sc.ToolPath, sc.Path)
			}
			if sc.PathChanged {
				flagged++
			}
		}
		forged += roundForged
		t.Logf("round %d: %d unlinks of precious; in the trail %d, %d of them with another path in the tool's memory (path_forged), %d flagged by the exit's reread so far",
			round, n, len(unlinks), roundForged, flagged)
		if wrong > 0 {
			t.Errorf("round %d: %d of %d unlinks that removed precious are not recorded as the kernel's %s", round, wrong, len(unlinks), precious)
		}
		if len(unlinks) != n {
			t.Errorf("round %d: %d unlinks worked, %d in the trail", round, n, len(unlinks))
		}
	}
	if n, err := tr.TakeDrops(slot); err != nil || n.Total() != 0 {
		t.Errorf("events lost in the kernel: %+v (%v)", n, err)
	}
	if forged == 0 {
		t.Errorf("in %d unlinks of precious (%d in the trail), the tool's memory never said another name: the race was never run, the test shows nothing", removed, worked)
	}
}
