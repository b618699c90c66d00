// Package seccomp generates classic-BPF seccomp filters for x86-64 and installs them.
package seccomp

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Action is a seccomp return value (SECCOMP_RET_*, with its data).
type Action uint32

const (
	Allow       = Action(unix.SECCOMP_RET_ALLOW)
	Log         = Action(unix.SECCOMP_RET_LOG) // allowed, and logged by the kernel audit subsystem
	KillProcess = Action(unix.SECCOMP_RET_KILL_PROCESS)
	// UserNotif holds the syscall and hands it to the filter's listener (a supervisor), which
	// answers for it. Of two filters' answers the kernel takes the stricter: an errno or a kill
	// of another filter wins over a notification.
	UserNotif = Action(unix.SECCOMP_RET_USER_NOTIF)
)

// Errno fails the syscall with e without running it.
func Errno(e unix.Errno) Action {
	return Action(unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA)
}

func (a Action) String() string {
	switch a & unix.SECCOMP_RET_ACTION_FULL {
	case Allow:
		return "allow"
	case Log:
		return "log"
	case KillProcess:
		return "kill"
	case UserNotif:
		return "notify"
	case unix.SECCOMP_RET_ERRNO:
		return "errno " + unix.ErrnoName(unix.Errno(a&unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("action %#x", uint32(a))
}

// IsErrno says whether a fails the syscall, and with which errno.
func (a Action) IsErrno() (unix.Errno, bool) {
	if a&unix.SECCOMP_RET_ACTION_FULL != unix.SECCOMP_RET_ERRNO {
		return 0, false
	}
	return unix.Errno(a & unix.SECCOMP_RET_DATA), true
}

// MaxValues bounds Arg.In and Arg.NotIn: every jump of a rule's block stays within the 8-bit
// offset cBPF has.
const MaxValues = 64

// Arg narrows a rule to the calls whose argument Index passes one test. Only the argument's
// low 32 bits are read: every argument a rule narrows on is an int or unsigned int, which the
// kernel truncates to 32 bits itself, so a caller setting the high bits (ioctl(fd, TIOCSTI |
// 1<<32), the bypass of CVE-2019-10063 against 64-bit comparisons) still meets the test.
type Arg struct {
	Index uint8    // 0..5
	Any   uint32   // the argument has one of these bits
	In    []uint32 // the argument is one of these
	NotIn []uint32 // the argument is none of these (an allowlist: the rule covers the rest)
}

// Matches says what the filter decides about an argument: whether a call with args is
// covered by the rule this Arg narrows. The agent names denials with it; the kernel tests in
// this package check that the program agrees.
func (a *Arg) Matches(args [6]uint64) bool {
	if a == nil {
		return true
	}
	v := uint32(args[a.Index%6])
	switch {
	case a.Any != 0:
		return v&a.Any != 0
	case a.In != nil:
		return slices.Contains(a.In, v)
	default:
		return !slices.Contains(a.NotIn, v)
	}
}

func (a *Arg) valid() error {
	n := 0
	for _, set := range []bool{a.Any != 0, len(a.In) > 0, len(a.NotIn) > 0} {
		if set {
			n++
		}
	}
	switch {
	case a.Index > 5:
		return fmt.Errorf("argument %d out of range", a.Index)
	case n != 1:
		return fmt.Errorf("argument %d needs exactly one of Any, In, NotIn", a.Index)
	case len(a.In) > MaxValues || len(a.NotIn) > MaxValues:
		return fmt.Errorf("argument %d: more than %d values", a.Index, MaxValues)
	}
	return nil
}

// key orders and identifies a narrowing; "" is the whole syscall.
func (a *Arg) key() string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "arg%d", a.Index)
	switch {
	case a.Any != 0:
		fmt.Fprintf(&b, " any %#x", a.Any)
	case a.In != nil:
		fmt.Fprintf(&b, " in %#x", a.In)
	default:
		fmt.Fprintf(&b, " notin %#x", a.NotIn)
	}
	return b.String()
}

// Rule applies Action to syscall Nr. With Arg set the rule covers only the calls whose
// argument passes Arg's test; the others go on to later rules of the same syscall and then
// the default.
type Rule struct {
	Nr     uint32
	Arg    *Arg
	Action Action
}

// Filter is a whole policy: rules first, then Default for every other syscall. BadArch is the
// answer to a syscall made through another ABI (i386 int 0x80, x32): those have other numbers,
// so rules written for x86-64 would not mean anything there.
type Filter struct {
	Rules   []Rule
	Default Action
	BadArch Action
}

const (
	maxInsns = 4096 // BPF_MAXINSNS
	x32Bit   = 0x40000000

	// struct seccomp_data offsets
	offNr   = 0
	offArch = 4
	offArgs = 16 // args[i] at 16 + 8*i; its low 32 bits first on little-endian x86-64
)

// Program compiles f to a classic-BPF program. Rules are emitted in (Nr, narrowed first)
// order, each as its own short block, so no jump ever needs more than the 8-bit offset cBPF
// has and the output is a pure function of the rule set. Arguments are loaded only inside
// their syscall's block: the kernel's per-syscall cache of always-allowed syscalls
// (seccomp_cache) still applies to every syscall no narrowed rule names.
func (f Filter) Program() ([]unix.SockFilter, error) {
	rules := slices.Clone(f.Rules)
	slices.SortFunc(rules, CompareRules)
	for i, r := range rules {
		if r.Nr >= x32Bit {
			return nil, fmt.Errorf("seccomp: syscall number %d out of range", r.Nr)
		}
		if r.Arg != nil {
			if err := r.Arg.valid(); err != nil {
				return nil, fmt.Errorf("seccomp: syscall %d: %w", r.Nr, err)
			}
		}
		if i > 0 && r.Nr == rules[i-1].Nr && r.Arg.key() == rules[i-1].Arg.key() {
			return nil, fmt.Errorf("seccomp: syscall %d has two rules for %q", r.Nr, r.Arg.key())
		}
	}
	p := []unix.SockFilter{
		ldAbs(offArch),
		jeq(unix.AUDIT_ARCH_X86_64, 1, 0),
		ret(f.BadArch),
		ldAbs(offNr),
		jge(x32Bit, 0, 1),
		ret(f.BadArch),
	}
	for _, r := range rules {
		if r.Arg == nil {
			p = append(p, jeq(r.Nr, 0, 1), ret(r.Action))
			continue
		}
		p = append(p, r.Arg.block(r.Nr, r.Action)...)
	}
	p = append(p, ret(f.Default))
	if len(p) > maxInsns {
		return nil, fmt.Errorf("seccomp: program of %d instructions exceeds %d", len(p), maxInsns)
	}
	return p, nil
}

// block is a narrowed rule: A holds nr on entry and again on a miss (it reloads it), so the
// next block tests the number as the first did.
//
//	jeq nr, 0, <past the block>
//	ld  args[i]
//	<test: to ret on a hit, to the reload on a miss>
//	ret action
//	ld  nr
func (a *Arg) block(nr uint32, act Action) []unix.SockFilter {
	var test []unix.SockFilter
	switch {
	case a.Any != 0:
		test = []unix.SockFilter{jset(a.Any, 0, 1)}
	case a.In != nil:
		n := len(a.In)
		for i, v := range a.In {
			miss := uint8(0)
			if i == n-1 {
				miss = 1
			}
			test = append(test, jeq(v, uint8(n-1-i), miss))
		}
	default:
		n := len(a.NotIn)
		for i, v := range a.NotIn {
			test = append(test, jeq(v, uint8(n-i), 0))
		}
	}
	b := []unix.SockFilter{jeq(nr, 0, uint8(len(test)+3)), ldAbs(offArgs + 8*uint32(a.Index))}
	b = append(b, test...)
	return append(b, ret(act), ldAbs(offNr))
}

func ldAbs(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}

func jeq(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

func jge(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

func jset(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

func ret(a Action) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: uint32(a)}
}

// CompareRules is the order Program emits rules in, which is the order the filter tries
// them: by syscall, a syscall's narrowed rules first (in a fixed order), its whole rule last.
func CompareRules(a, b Rule) int {
	if c := cmp.Compare(a.Nr, b.Nr); c != 0 {
		return c
	}
	if (a.Arg == nil) != (b.Arg == nil) {
		if a.Arg == nil {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.Arg.key(), b.Arg.key())
}
