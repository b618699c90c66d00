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
	return runArgs(t, p, arch, nr, [6]uint64{arg0})
}

func runArgs(t *testing.T, p []unix.SockFilter, arch, nr uint32, args [6]uint64) Action {
	t.Helper()
	var data [64]byte
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[offArgs+8*i:], a)
	}
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
			{Nr: unix.SYS_UNSHARE, Arg: &Arg{Any: nsFlags}, Action: eperm},
			{Nr: unix.SYS_CLONE3, Action: Errno(unix.ENOSYS)},
		},
	}
	allowList := Filter{
		Default: KillProcess,
		BadArch: KillProcess,
		Rules: []Rule{
			{Nr: unix.SYS_READ, Action: Allow},
			{Nr: unix.SYS_UNSHARE, Action: Allow},
			{Nr: unix.SYS_UNSHARE, Arg: &Arg{Any: nsFlags}, Action: eperm}, // narrower rule wins, whatever the order
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

// Narrowed rules on any argument, by bits, by value and by exclusion: the program decides as
// Arg.Matches says it does (the agent names denials with Matches).
func TestProgramArgs(t *testing.T) {
	eperm, noaf := Errno(unix.EPERM), Errno(unix.EAFNOSUPPORT)
	f := Filter{
		Default: Allow,
		BadArch: KillProcess,
		Rules: []Rule{
			{Nr: unix.SYS_SOCKET, Arg: &Arg{NotIn: []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}}, Action: noaf},
			{Nr: unix.SYS_IOCTL, Arg: &Arg{Index: 1, In: []uint32{unix.TIOCSTI, unix.TIOCLINUX}}, Action: eperm},
			{Nr: unix.SYS_MEMFD_CREATE, Arg: &Arg{Index: 1, Any: unix.MFD_EXEC}, Action: KillProcess},
			{Nr: unix.SYS_EXECVEAT, Arg: &Arg{Index: 4, Any: unix.AT_EMPTY_PATH}, Action: eperm},
			{Nr: unix.SYS_PTRACE, Action: eperm},
		},
	}
	p, err := f.Program()
	if err != nil {
		t.Fatal(err)
	}
	const x86 = unix.AUDIT_ARCH_X86_64
	for _, tc := range []struct {
		name string
		nr   uint32
		args [6]uint64
		want Action
	}{
		{"inet", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, Allow},
		{"unix", unix.SYS_SOCKET, [6]uint64{unix.AF_UNIX}, Allow},
		{"inet6", unix.SYS_SOCKET, [6]uint64{unix.AF_INET6}, Allow},
		{"netlink", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK}, noaf},
		{"ax25: no bit of 0x34", unix.SYS_SOCKET, [6]uint64{unix.AF_AX25}, noaf},
		{"x25", unix.SYS_SOCKET, [6]uint64{unix.AF_X25}, noaf},
		{"family 0", unix.SYS_SOCKET, [6]uint64{0}, noaf},
		{"netlink with high bits", unix.SYS_SOCKET, [6]uint64{1<<32 | unix.AF_NETLINK}, noaf},
		{"inet with high bits", unix.SYS_SOCKET, [6]uint64{1<<32 | unix.AF_INET}, Allow},
		{"TIOCSTI", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}, eperm},
		{"TIOCLINUX", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCLINUX}, eperm},
		{"TIOCSTI with high bits", unix.SYS_IOCTL, [6]uint64{0, 1<<32 | unix.TIOCSTI}, eperm},
		{"TCGETS", unix.SYS_IOCTL, [6]uint64{0, unix.TCGETS}, Allow},
		{"TIOCSTI in arg0 only", unix.SYS_IOCTL, [6]uint64{unix.TIOCSTI, unix.TCGETS}, Allow},
		{"memfd exec", unix.SYS_MEMFD_CREATE, [6]uint64{0, unix.MFD_EXEC | unix.MFD_CLOEXEC}, KillProcess},
		{"memfd plain", unix.SYS_MEMFD_CREATE, [6]uint64{0, unix.MFD_CLOEXEC}, Allow},
		{"execveat empty path", unix.SYS_EXECVEAT, [6]uint64{3, 0, 0, 0, unix.AT_EMPTY_PATH}, eperm},
		{"execveat path", unix.SYS_EXECVEAT, [6]uint64{unix.AT_FDCWD & 0xffffffff, 0, 0, 0, 0}, Allow},
		{"after narrowed blocks", unix.SYS_PTRACE, [6]uint64{}, eperm},
		{"other", unix.SYS_GETPID, [6]uint64{}, Allow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runArgs(t, p, x86, tc.nr, tc.args); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for _, r := range f.Rules {
				if r.Nr == tc.nr && r.Arg != nil && r.Arg.Matches(tc.args) != (tc.want != Allow) {
					t.Fatalf("Matches says %v, the program %v", r.Arg.Matches(tc.args), tc.want)
				}
			}
		})
	}
}

// The longest allowlist a rule may have still jumps within 8 bits, first and last value alike.
func TestProgramLongLists(t *testing.T) {
	vals := make([]uint32, MaxValues)
	for i := range vals {
		vals[i] = uint32(1000 + i)
	}
	for _, a := range []*Arg{{In: vals}, {NotIn: vals}} {
		f := Filter{Default: Allow, Rules: []Rule{{Nr: 1, Arg: a, Action: Log}, {Nr: 2, Action: KillProcess}}}
		p, err := f.Program()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []uint32{vals[0], vals[MaxValues-1], 5} {
			want := Allow
			if a.Matches([6]uint64{uint64(v)}) {
				want = Log
			}
			if got := run(t, p, unix.AUDIT_ARCH_X86_64, 1, uint64(v)); got != want {
				t.Errorf("%s value %d: got %v, want %v", a.key(), v, got, want)
			}
		}
		if got := run(t, p, unix.AUDIT_ARCH_X86_64, 2, 0); got != KillProcess {
			t.Errorf("the rule after the long block: %v", got)
		}
	}
	if _, err := (Filter{Rules: []Rule{{Nr: 1, Arg: &Arg{In: append(vals, 1)}}}}).Program(); err == nil {
		t.Error("accepted more than MaxValues values")
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
		{"two tests", Filter{Rules: []Rule{{Nr: 1, Arg: &Arg{Any: 1, In: []uint32{2}}}}}},
		{"no test", Filter{Rules: []Rule{{Nr: 1, Arg: &Arg{Index: 2}}}}},
		{"argument 6", Filter{Rules: []Rule{{Nr: 1, Arg: &Arg{Index: 6, Any: 1}}}}},
		{"duplicate narrowed", Filter{Rules: []Rule{{Nr: 1, Arg: &Arg{Any: 1}}, {Nr: 1, Arg: &Arg{Any: 1}, Action: Log}}}},
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
	a := Filter{Default: Allow, Rules: []Rule{{Nr: 5, Action: Log}, {Nr: 1, Action: Log}, {Nr: 3, Arg: &Arg{Any: 4}, Action: Log}}}
	b := Filter{Default: Allow, Rules: []Rule{{Nr: 3, Arg: &Arg{Any: 4}, Action: Log}, {Nr: 1, Action: Log}, {Nr: 5, Action: Log}}}
	pa, _ := a.Program()
	pb, _ := b.Program()
	if fmt.Sprint(pa) != fmt.Sprint(pb) {
		t.Fatal("rule order changed the program")
	}
}
