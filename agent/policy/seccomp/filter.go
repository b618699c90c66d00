// Package seccomp generates classic-BPF seccomp filters for x86-64 and installs them.
package seccomp

import (
	"cmp"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Action is a seccomp return value (SECCOMP_RET_*, with its data).
type Action uint32

const (
	Allow       = Action(unix.SECCOMP_RET_ALLOW)
	Log         = Action(unix.SECCOMP_RET_LOG) // allowed, and logged by the kernel audit subsystem
	KillProcess = Action(unix.SECCOMP_RET_KILL_PROCESS)
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
	case unix.SECCOMP_RET_ERRNO:
		return "errno " + unix.ErrnoName(unix.Errno(a&unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("action %#x", uint32(a))
}

// Rule applies Action to syscall Nr. With Arg0Any set the rule covers only calls whose first
// argument has one of those bits set (clone and unshare namespace flags); the others go on to
// later rules of the same syscall and then the default.
type Rule struct {
	Nr      uint32
	Arg0Any uint32
	Action  Action
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
	offArg0 = 16 // low 32 bits on little-endian x86-64
)

// Program compiles f to a classic-BPF program. Rules are emitted in (Nr, narrow first) order,
// each as its own short block, so no jump ever needs more than the 8-bit offset cBPF has and
// the output is a pure function of the rule set.
func (f Filter) Program() ([]unix.SockFilter, error) {
	rules := slices.Clone(f.Rules)
	slices.SortFunc(rules, func(a, b Rule) int {
		if c := cmp.Compare(a.Nr, b.Nr); c != 0 {
			return c
		}
		// narrowed rules before the whole-syscall rule: the latter ends the syscall's block
		return cmp.Compare(b.Arg0Any, a.Arg0Any)
	})
	for i := 1; i < len(rules); i++ {
		if rules[i].Nr == rules[i-1].Nr && rules[i].Arg0Any == rules[i-1].Arg0Any {
			return nil, fmt.Errorf("seccomp: syscall %d has two rules for argument mask %#x", rules[i].Nr, rules[i].Arg0Any)
		}
	}
	for _, r := range rules {
		if r.Nr >= x32Bit {
			return nil, fmt.Errorf("seccomp: syscall number %d out of range", r.Nr)
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
		if r.Arg0Any == 0 {
			p = append(p, jeq(r.Nr, 0, 1), ret(r.Action))
			continue
		}
		// A holds nr on entry and again on exit (a miss reloads it)
		p = append(p,
			jeq(r.Nr, 0, 3),
			ldAbs(offArg0),
			jset(r.Arg0Any, 0, 1),
			ret(r.Action),
			ldAbs(offNr),
		)
	}
	p = append(p, ret(f.Default))
	if len(p) > maxInsns {
		return nil, fmt.Errorf("seccomp: program of %d instructions exceeds %d", len(p), maxInsns)
	}
	return p, nil
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
