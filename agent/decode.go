package agent

import (
	"bytes"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/bpf"
)

// wireSizes is the size of each op's struct, from the types bpf2go generated out of
// bpf/lib/berm.h. A record whose header disagrees is malformed: counted, never guessed at.
var wireSizes = map[bpf.ProcessBermOp]uintptr{
	bpf.ProcessBermOpBERM_OP_EXEC:    unsafe.Sizeof(bpf.ProcessBermExec{}),
	bpf.ProcessBermOpBERM_OP_FORK:    unsafe.Sizeof(bpf.ProcessBermFork{}),
	bpf.ProcessBermOpBERM_OP_EXIT:    unsafe.Sizeof(bpf.ProcessBermExit{}),
	bpf.ProcessBermOpBERM_OP_OPEN:    unsafe.Sizeof(bpf.ProcessBermOpen{}),
	bpf.ProcessBermOpBERM_OP_CONNECT: unsafe.Sizeof(bpf.ProcessBermConnect{}),
	bpf.ProcessBermOpBERM_OP_SYSCALL: unsafe.Sizeof(bpf.ProcessBermSyscall{}),
	bpf.ProcessBermOpBERM_OP_DENY:    unsafe.Sizeof(bpf.ProcessBermDeny{}),

	bpf.ProcessBermOpBERM_OP_SYSCALL_PATH: unsafe.Sizeof(bpf.ProcessBermSyscallPath{}),
}

var hdrSize = int(unsafe.Sizeof(bpf.ProcessBermHdr{}))

// peekHeader reads the header of a raw record without decoding the rest.
func peekHeader(raw []byte) (*bpf.ProcessBermHdr, bool) {
	if len(raw) < hdrSize {
		return nil, false
	}
	return (*bpf.ProcessBermHdr)(unsafe.Pointer(&raw[0])), true
}

// cast views raw as a T after checking the size the kernel wrote against T's.
func cast[T any](raw []byte) (*T, error) {
	var zero T
	if uintptr(len(raw)) < unsafe.Sizeof(zero) {
		return nil, fmt.Errorf("record of %d bytes, want %d", len(raw), unsafe.Sizeof(zero))
	}
	return (*T)(unsafe.Pointer(&raw[0])), nil
}

// decode turns one raw record into an event. Time is converted by the caller's clock.
func decode(raw []byte, ev *event.Event) error {
	h, ok := peekHeader(raw)
	if !ok {
		return fmt.Errorf("record of %d bytes is shorter than the header", len(raw))
	}
	op := bpf.ProcessBermOp(h.Op)
	want, known := wireSizes[op]
	if !known {
		return fmt.Errorf("unknown op %d", h.Op)
	}
	if uintptr(h.Size) != want || uintptr(len(raw)) < want {
		return fmt.Errorf("op %d: header says %d bytes, record has %d, contract says %d", h.Op, h.Size, len(raw), want)
	}
	ev.PID, ev.TID, ev.PPID, ev.UID = h.Pid, h.Tid, h.Ppid, h.Uid
	ev.Comm = cstr(h.Comm[:])
	switch op {
	case bpf.ProcessBermOpBERM_OP_EXEC:
		e, _ := cast[bpf.ProcessBermExec](raw)
		ev.Kind = event.KindExec
		n := int(e.ArgsLen)
		if n > len(e.Args) {
			n = len(e.Args)
		}
		ev.Exec = &event.Exec{
			Filename:  cstr(e.Filename[:]),
			Argv:      splitArgs(bytesOf(e.Args[:n])),
			Truncated: e.ArgcTruncated != 0,
			Mode:      e.ExeMode,
			Setuid:    e.ExeMode&(unix.S_ISUID|unix.S_ISGID) != 0,
			Deleted:   e.ExeNlink == 0,
			ExeName:   cstr(e.ExeName[:]),
			EUID:      e.Euid,
		}
	case bpf.ProcessBermOpBERM_OP_FORK:
		e, _ := cast[bpf.ProcessBermFork](raw)
		ev.Kind = event.KindFork
		ev.Fork = &event.Fork{ChildPID: e.ChildPid}
	case bpf.ProcessBermOpBERM_OP_EXIT:
		e, _ := cast[bpf.ProcessBermExit](raw)
		ev.Kind = event.KindExit
		ws := syscall.WaitStatus(uint32(e.Code))
		x := &event.Exit{}
		if ws.Signaled() {
			x.Signal = int(ws.Signal())
		} else {
			x.Code = ws.ExitStatus()
		}
		ev.Exit = x
	case bpf.ProcessBermOpBERM_OP_OPEN:
		e, _ := cast[bpf.ProcessBermOpen](raw)
		ev.Kind = event.KindOpen
		ev.Open = &event.Open{
			Path: cstr(e.Path[:]), Dirfd: e.Dirfd, Flags: e.Flags, Mode: e.Mode,
			Result: e.Ret, Errno: errnoName(e.Ret),
		}
	case bpf.ProcessBermOpBERM_OP_CONNECT:
		e, _ := cast[bpf.ProcessBermConnect](raw)
		ev.Kind = event.KindConnect
		c := &event.Connect{Port: e.Port, Result: e.Ret, Errno: errnoName(e.Ret)}
		switch e.Family {
		case unix.AF_INET:
			c.Family = "inet"
			c.Addr = netip.AddrFrom4([4]byte(e.Addr[:4])).String()
		case unix.AF_INET6:
			c.Family = "inet6"
			c.Addr = netip.AddrFrom16(e.Addr).String()
		case unix.AF_UNIX:
			c.Family = "unix"
			c.Addr = cstr(e.UnixPath[:])
		default:
			c.Family = fmt.Sprint(e.Family)
		}
		ev.Connect = c
	case bpf.ProcessBermOpBERM_OP_SYSCALL:
		e, _ := cast[bpf.ProcessBermSyscall](raw)
		ev.Kind = event.KindSyscall
		ev.Syscall = decodeSyscall(e)
	case bpf.ProcessBermOpBERM_OP_SYSCALL_PATH:
		e, _ := cast[bpf.ProcessBermSyscallPath](raw)
		ev.Kind = event.KindSyscall
		ev.Syscall = decodeSyscall(&e.Sc)
		ev.Syscall.Path, ev.Syscall.Path2 = cstr(e.Path[:]), cstr(e.Path2[:])
	case bpf.ProcessBermOpBERM_OP_DENY:
		e, _ := cast[bpf.ProcessBermDeny](raw)
		ev.Kind = event.KindDenial
		ev.Denial = decodeDeny(e)
	}
	return nil
}

func decodeSyscall(e *bpf.ProcessBermSyscall) *event.Syscall {
	return &event.Syscall{Nr: e.Nr, Name: event.SyscallName(e.Nr), Args: e.Args, Result: e.Ret, Errno: errnoName(e.Ret)}
}

func decodeDeny(e *bpf.ProcessBermDeny) *event.Denial {
	d := &event.Denial{Audit: e.Audit != 0, Rule: fmt.Sprintf("rule-%d", e.Rule)}
	if e.Rule == 0 {
		d.Rule = "default-deny"
	}
	switch bpf.ProcessBermLayer(e.Layer) {
	case bpf.ProcessBermLayerBERM_LAYER_SECCOMP:
		d.Layer, d.Surface, d.Object = event.LayerSeccomp, event.SurfacePolicy, event.SyscallName(e.Nr)
	case bpf.ProcessBermLayerBERM_LAYER_LANDLOCK:
		d.Layer, d.Surface, d.Object = event.LayerLandlock, event.SurfacePolicy, cstr(e.Path[:])
	case bpf.ProcessBermLayerBERM_LAYER_CGROUP_SOCK:
		d.Layer, d.Surface = event.LayerCgroupSock, event.SurfacePolicy
		if e.Nr == unix.SYS_SOCKET {
			d.Object = fmt.Sprintf("socket(family %d, type %d, protocol %d)", e.Family, e.Proto>>16, e.Proto&0xffff)
		} else {
			addr := netip.AddrFrom16(e.Addr).Unmap()
			d.Object = netip.AddrPortFrom(addr, e.Port).String()
		}
	case bpf.ProcessBermLayerBERM_LAYER_LSM:
		d.Layer, d.Surface, d.Object = event.LayerLSM, event.SurfacePolicy, cstr(e.Path[:])
	default:
		d.Layer = fmt.Sprintf("layer-%d", e.Layer)
	}
	return d
}

func errnoName(ret int64) string {
	if ret >= 0 || ret < -4095 {
		return ""
	}
	if n := unix.ErrnoName(syscall.Errno(-ret)); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", -ret)
}

func bytesOf(s []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func cstr(s []int8) string {
	b := bytesOf(s)
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

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
