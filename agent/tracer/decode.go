package tracer

import (
	"bytes"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

// The tracer's programs (process.bpf.c, syscalls.bpf.c) produce these kinds.
func init() {
	wire.Register(bpf.WireBermOpBERM_OP_EXEC, decodeExec)
	wire.Register(bpf.WireBermOpBERM_OP_FORK, decodeFork)
	wire.Register(bpf.WireBermOpBERM_OP_EXIT, decodeExit)
	wire.Register(bpf.WireBermOpBERM_OP_OPEN, decodeOpen)
	wire.Register(bpf.WireBermOpBERM_OP_CONNECT, decodeConnect)
	wire.Register(bpf.WireBermOpBERM_OP_SYSCALL, decodeSyscall)
	wire.Register(bpf.WireBermOpBERM_OP_SYSCALL_PATH, decodeSyscallPath)
}

func decodeExec(e *bpf.WireBermExec, ev *event.Event) {
	ev.Kind = event.KindExec
	n := min(int(e.ArgsLen), len(e.Args))
	ev.Exec = &event.Exec{
		Filename:  wire.CString(e.Filename[:]),
		Argv:      splitArgs(wire.Bytes(e.Args[:n])),
		Truncated: e.ArgcTruncated != 0,
		Mode:      e.ExeMode,
		Setuid:    e.ExeMode&(unix.S_ISUID|unix.S_ISGID) != 0,
		Deleted:   e.ExeNlink == 0,
		ExeName:   wire.CString(e.ExeName[:]),
		EUID:      e.Euid,
	}
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

func decodeOpen(e *bpf.WireBermOpen, ev *event.Event) {
	ev.Kind = event.KindOpen
	ev.Open = &event.Open{
		Path: wire.CString(e.Path[:]), Dirfd: e.Dirfd, Flags: e.Flags, Mode: e.Mode,
		Result: e.Ret, Errno: wire.ErrnoName(e.Ret),
	}
}

func decodeConnect(e *bpf.WireBermConnect, ev *event.Event) {
	ev.Kind = event.KindConnect
	c := &event.Connect{Port: e.Port, Result: e.Ret, Errno: wire.ErrnoName(e.Ret)}
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

func decodeSyscallPath(e *bpf.WireBermSyscallPath, ev *event.Event) {
	decodeSyscall(&e.Sc, ev)
	ev.Syscall.Path, ev.Syscall.Path2 = wire.CString(e.Path[:]), wire.CString(e.Path2[:])
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
