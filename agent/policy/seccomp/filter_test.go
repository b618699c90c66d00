package seccomp

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// run interprets a seccomp program the way the kernel does for the subset Program emits
// (and fails loudly on anything else), so the table below checks what the filter decides.
func run(t *testing.T, p []unix.SockFilter, arch, nr uint32, arg0 uint64) Action {
	t.Helper()
	var data [64]byte
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	binary.LittleEndian.PutUint64(data[offArg0:], arg0)
	var a uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			pc += int(pick(a == in.K, in.Jt, in.Jf))
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			pc += int(pick(a >= in.K, in.Jt, in.Jf))
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			pc += int(pick(a&in.K != 0, in.Jt, in.Jf))
		case unix.BPF_RET | unix.BPF_K:
			return Action(in.K)
		default:
			t.Fatalf("pc %d: unexpected opcode %#x", pc, in.Code)
		}
	}
	t.Fatal("program fell off its end")
	return 0
}

func pick(c bool, jt, jf uint8) uint8 {
	if c {
		return jt
	}
	return jf
}

const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

func TestProgram(t *testing.T) {
	eperm := Errno(unix.EPERM)
	denyList := Filter{
		Default: Allow,
		BadArch: KillProcess,
		Rules: []Rule{
			{Nr: unix.SYS_PTRACE, Action: eperm},
			{Nr: unix.SYS_MOUNT, Action: eperm},
			{Nr: unix.SYS_UNSHARE, Arg0Any: nsFlags, Action: eperm},
			{Nr: unix.SYS_CLONE3, Action: Errno(unix.ENOSYS)},
		},
	}
	allowList := Filter{
		Default: KillProcess,
		BadArch: KillProcess,
		Rules: []Rule{
			{Nr: unix.SYS_READ, Action: Allow},
			{Nr: unix.SYS_UNSHARE, Action: Allow},
			{Nr: unix.SYS_UNSHARE, Arg0Any: nsFlags, Action: eperm}, // narrower rule wins, whatever the order
		},
	}
	const x86 = unix.AUDIT_ARCH_X86_64
	for _, tc := range []struct {
		name string
		f    Filter
		arch uint32
		nr   uint32
		arg0 uint64
		want Action
	}{
		{"deny-list denied", denyList, x86, unix.SYS_PTRACE, 0, eperm},
		{"deny-list mount", denyList, x86, unix.SYS_MOUNT, 0, eperm},
		{"deny-list other allowed", denyList, x86, unix.SYS_GETPID, 0, Allow},
		{"unshare new namespace", denyList, x86, unix.SYS_UNSHARE, unix.CLONE_NEWUSER, eperm},
		{"unshare several flags", denyList, x86, unix.SYS_UNSHARE, unix.CLONE_FILES | unix.CLONE_NEWNET, eperm},
		{"unshare no namespace", denyList, x86, unix.SYS_UNSHARE, unix.CLONE_FILES, Allow},
		{"namespace bits in high word ignored by kernel", denyList, x86, unix.SYS_UNSHARE, 1 << 40, Allow},
		{"clone3 falls back", denyList, x86, unix.SYS_CLONE3, 0, Errno(unix.ENOSYS)},
		{"i386 abi", denyList, unix.AUDIT_ARCH_I386, unix.SYS_GETPID, 0, KillProcess},
		{"x32 abi", denyList, x86, unix.SYS_GETPID | x32Bit, 0, KillProcess},
		{"allow-list allowed", allowList, x86, unix.SYS_READ, 0, Allow},
		{"allow-list default", allowList, x86, unix.SYS_WRITE, 0, KillProcess},
		{"allow-list narrowed", allowList, x86, unix.SYS_UNSHARE, unix.CLONE_NEWPID, eperm},
		{"allow-list whole", allowList, x86, unix.SYS_UNSHARE, unix.CLONE_FS, Allow},
		{"highest syscall", denyList, x86, 511, 0, Allow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.f.Program()
			if err != nil {
				t.Fatal(err)
			}
			if got := run(t, p, tc.arch, tc.nr, tc.arg0); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProgramRejects(t *testing.T) {
	many := Filter{Default: Allow}
	for nr := range uint32(2100) {
		many.Rules = append(many.Rules, Rule{Nr: nr, Action: Log})
	}
	for _, tc := range []struct {
		name string
		f    Filter
	}{
		{"duplicate", Filter{Rules: []Rule{{Nr: 1, Action: Allow}, {Nr: 1, Action: Log}}}},
		{"x32 number", Filter{Rules: []Rule{{Nr: x32Bit | 1}}}},
		{"too long", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f.Program(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestProgramDeterministic(t *testing.T) {
	a := Filter{Default: Allow, Rules: []Rule{{Nr: 5, Action: Log}, {Nr: 1, Action: Log}, {Nr: 3, Arg0Any: 4, Action: Log}}}
	b := Filter{Default: Allow, Rules: []Rule{{Nr: 3, Arg0Any: 4, Action: Log}, {Nr: 1, Action: Log}, {Nr: 5, Action: Log}}}
	pa, _ := a.Program()
	pb, _ := b.Program()
	if fmt.Sprint(pa) != fmt.Sprint(pb) {
		t.Fatal("rule order changed the program")
	}
}
