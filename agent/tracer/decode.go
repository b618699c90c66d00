package tracer

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

// The tracer's programs (process.bpf.c, syscalls.bpf.c) produce these kinds.
func init() {
	wire.RegisterVariable(bpf.WireBermOpBERM_OP_EXEC, tail(bpf.WireBermExec{}, bpf.BermPathMax+bpf.BermExePathMax+bpf.BermArgsMax), decodeExec)
	wire.Register(bpf.WireBermOpBERM_OP_FORK, decodeFork)
	wire.Register(bpf.WireBermOpBERM_OP_EXIT, decodeExit)
	wire.RegisterVariable(bpf.WireBermOpBERM_OP_OPEN, tail(bpf.WireBermOpen{}, 2*bpf.BermPathMax), decodeOpen)
	wire.Register(bpf.WireBermOpBERM_OP_CONNECT, decodeConnect)
	wire.Register(bpf.WireBermOpBERM_OP_SYSCALL, decodeSyscall)
	wire.RegisterVariable(bpf.WireBermOpBERM_OP_SYSCALL_PATH, tail(bpf.WireBermSyscallPath{}, 4*bpf.BermPathMax), decodeSyscallPath)
}

// tail is the largest size of a variable record: its struct and at most n bytes of strings.
func tail[T any](v T, n uintptr) uintptr { return unsafe.Sizeof(v) + n }

func decodeExec(e *bpf.WireBermExec, b []byte, ev *event.Event) error {
	t := wire.NewTail(b)
	filename, exePath, args := t.Next(e.Filename), t.Next(e.ExePath), t.Next(e.Args)
	ev.Kind = event.KindExec
	ev.Exec = &event.Exec{
		Filename:  filename.S,
		Argv:      splitArgs([]byte(args.S)),
		Truncated: args.Truncated,
		ArgsLen:   args.Full,
		Mode:      e.ExeMode,
		Setuid:    e.ExeMode&(unix.S_ISUID|unix.S_ISGID) != 0,
		Deleted:   e.ExeNlink == 0,
		ExeName:   wire.CString(e.ExeName[:]),
		EUID:      e.Euid,
		EGID:      e.Egid,
	}
	// a cut path would name another file: only a whole one is kept
	if !exePath.Truncated {
		ev.Exec.ExePath = exePath.S
	}
	return t.Err()
}

func decodeFork(e *bpf.WireBermFork, ev *event.Event) {
	ev.Kind = event.KindFork
	ev.Fork = &event.Fork{ChildPID: e.ChildPid}
}

func decodeExit(e *bpf.WireBermExit, ev *event.Event) {
	ev.Kind = event.KindExit
	ws := syscall.WaitStatus(uint32(e.Code))
	x := &event.Exit{}
	if ws.Signaled() {
		x.Signal = int(ws.Signal())
	} else {
		x.Code = ws.ExitStatus()
	}
	ev.Exit = x
}

func decodeOpen(e *bpf.WireBermOpen, b []byte, ev *event.Event) error {
	t := wire.NewTail(b)
	path, base := t.Next(e.Path), t.Next(e.Base)
	ev.Kind = event.KindOpen
	o := &event.Open{
		Path: path.S, Dirfd: e.Dirfd, Flags: e.Flags, Mode: e.Mode,
		Result: e.Ret, Errno: wire.ErrnoName(e.Ret),
		PathTruncated: path.Truncated, PathSource: wire.Source(e.Source),
	}
	if path.Truncated {
		o.PathLen = path.Full
	}
	// the directory's path is the kernel's: joined with a cut name it would name another file
	if base.S != "" && !base.Truncated && !path.Truncated {
		o.ResolvedPath = strings.TrimSuffix(base.S, "/") + "/" + path.S
	}
	ev.Open = o
	return t.Err()
}

func decodeConnect(e *bpf.WireBermConnect, ev *event.Event) {
	ev.Kind = event.KindConnect
	c := &event.Connect{Port: e.Port, Result: e.Ret, Errno: wire.ErrnoName(e.Ret), AddrSource: wire.Source(e.Source)}
	switch e.Family {
	case unix.AF_INET:
		c.Family = "inet"
		c.Addr = netip.AddrFrom4([4]byte(e.Addr[:4])).String()
	case unix.AF_INET6:
		c.Family = "inet6"
		c.Addr = netip.AddrFrom16(e.Addr).String()
	case unix.AF_UNIX:
		c.Family = "unix"
		c.Addr = wire.CString(e.UnixPath[:])
	default:
		c.Family = fmt.Sprint(e.Family)
	}
	ev.Connect = c
}

func decodeSyscall(e *bpf.WireBermSyscall, ev *event.Event) {
	ev.Kind = event.KindSyscall
	ev.Syscall = &event.Syscall{Nr: e.Nr, Name: event.SyscallName(e.Nr), Args: e.Args, Result: e.Ret, Errno: wire.ErrnoName(e.Ret)}
}

func decodeSyscallPath(e *bpf.WireBermSyscallPath, b []byte, ev *event.Event) error {
	decodeSyscall(&e.Sc, ev)
	t := wire.NewTail(b)
	p1, p2 := t.Next(e.Path), t.Next(e.Path2)
	sc := ev.Syscall
	sc.Path, sc.Path2 = p1.S, p2.S
	sc.PathSource = wire.Source(e.Source)
	sc.PathTruncated, sc.Path2Truncated = p1.Truncated, p2.Truncated
	if p1.Truncated {
		sc.PathLen = p1.Full
	}
	if p2.Truncated {
		sc.Path2Len = p2.Full
	}
	sc.PathChanged = e.Changed&uint32(bpf.WireBermChangedBERM_CHANGED_PATH) != 0
	sc.Path2Changed = e.Changed&uint32(bpf.WireBermChangedBERM_CHANGED_PATH2) != 0
	if p2.S != "" || e.Kobj2.Seen != 0 {
		sc.Path2Source = wire.Source(e.Source2)
	}
	k1, k2 := t.Next(e.Kobj.Path), t.Next(e.Kobj2.Path)
	acts := actsOnEntry(e.Sc.Nr)
	if e.Kobj.Seen != 0 {
		sc.ToolPath, sc.PathForged = p1.S, acts && forged(p1, k1)
		sc.Path, sc.PathSource, sc.PathTruncated, sc.PathLen = k1.S, "kernel", k1.Truncated, 0
		if k1.Truncated {
			sc.PathLen = k1.Full
		}
		sc.Dev, sc.Ino = devString(e.Kobj.Dev), e.Kobj.Ino
	}
	if e.Kobj2.Seen != 0 {
		sc.ToolPath2, sc.Path2Forged = p2.S, acts && forged(p2, k2)
		sc.Path2, sc.Path2Source, sc.Path2Truncated, sc.Path2Len = k2.S, "kernel", k2.Truncated, 0
		if k2.Truncated {
			sc.Path2Len = k2.Full
		}
		sc.Dev2, sc.Ino2 = devString(e.Kobj2.Dev), e.Kobj2.Ino
	}
	return t.Err()
}

// actsOnEntry: the syscall acts on the directory entry its path names, never following a
// final symlink (unlink, rmdir, rename, mkdir, mknod and their *at forms), so the last
// component of the tool's path is the name of the dentry the kernel acted on. truncate and
// exec follow a final symlink: their names may differ without any forgery.
func actsOnEntry(nr uint32) bool {
	switch nr {
	case unix.SYS_UNLINK, unix.SYS_UNLINKAT, unix.SYS_RMDIR, unix.SYS_RENAME, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2,
		unix.SYS_MKDIR, unix.SYS_MKDIRAT, unix.SYS_MKNOD, unix.SYS_MKNODAT:
		return true
	}
	return false
}

// forged says whether the tool's path names another entry than the kernel's view: its last
// component is not the last component of the kernel's path. The directories that led there
// are not compared (symbolic links and bind mounts rename them without any forgery), nor are
// cut paths. Names are compared byte for byte, as the kernel looked them up.
func forged(tool, kernel wire.Str) bool {
	if tool.Truncated || kernel.S == "" {
		return false
	}
	return lastName(tool.S) != lastName(kernel.S)
}

func lastName(p string) string {
	p = strings.TrimRight(p, "/")
	if p == "" {
		return "/"
	}
	return p[strings.LastIndexByte(p, '/')+1:]
}

// devString is a device number in the kernel's encoding (major << 20 | minor) as major:minor.
func devString(dev uint32) string { return fmt.Sprintf("%d:%d", dev>>20, dev&(1<<20-1)) }

func splitArgs(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}
