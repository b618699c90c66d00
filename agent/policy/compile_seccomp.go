package policy

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// SyscallRule is what the filter does to one syscall (Arg0Any: only when the first argument
// has one of these bits).
type SyscallRule struct {
	Nr      uint32
	Name    string
	Arg0Any uint32
	Action  string // as seccomp.Action spells it: "errno EPERM", "log", "allow", "kill"
	RuleID  uint32
}

// newNamespaceFlags are the CLONE_NEW* flags; all fit in the low 32 bits the filter reads.
const newNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// compileSeccomp builds the filter. In Audit mode every refusal becomes SECCOMP_RET_LOG:
// the syscall runs and the kernel logs it; the agent attributes it through c.Syscalls.
func (p *Policy) compileSeccomp(c *Compiled) Errors {
	s := p.Spec.Syscalls
	audit := p.Spec.Mode == Audit
	deny := func(a seccomp.Action) seccomp.Action {
		if audit {
			return seccomp.Log
		}
		return a
	}
	eperm := deny(seccomp.Errno(unix.EPERM))
	f := seccomp.Filter{Default: seccomp.Allow, BadArch: deny(seccomp.KillProcess)}

	type ruleSrc struct {
		r           seccomp.Rule
		field, text string
	}
	var rules []ruleSrc
	whole := map[uint32]int{} // nr -> index in rules of its whole-syscall rule
	add := func(name string, arg0 uint32, a seccomp.Action, field, text string) {
		nr, _ := event.SyscallNumber(name) // names were validated when parsing
		if arg0 == 0 {
			if i, ok := whole[nr]; ok {
				rules[i] = ruleSrc{seccomp.Rule{Nr: nr, Action: a}, field, text} // a later, stricter source wins
				return
			}
			whole[nr] = len(rules)
		}
		rules = append(rules, ruleSrc{seccomp.Rule{Nr: nr, Arg0Any: arg0, Action: a}, field, text})
	}
	if len(s.Allow) > 0 {
		switch s.DefaultAction {
		case ActionKill:
			f.Default = deny(seccomp.KillProcess)
		case ActionLog:
			f.Default = seccomp.Log
		default:
			f.Default = eperm
		}
		for i, name := range s.Allow {
			add(name, 0, seccomp.Allow, fmt.Sprintf("spec.syscalls.allow[%d]", i), "allow "+name)
		}
	}
	for i, name := range s.Deny {
		add(name, 0, eperm, fmt.Sprintf("spec.syscalls.deny[%d]", i), "deny "+name)
	}
	// socket() families: unix (1), inet (2) and inet6 (10) have none of the bits 0x34, which
	// every other common family has one of: netlink (16), packet (17), key (15), vsock (40),
	// xdp (44), alg (38), bluetooth (31), can (29), ... (a filter can test bits, not sets).
	// The cgroup hooks only ever see inet sockets: this is where the others are refused.
	families := uint32(0x34)
	famText := "deny socket families other than unix, inet and inet6 (netlink, packet, key, vsock, ...)"
	if p.Spec.Network.AllowNetlink {
		families = 0x24
		famText = "deny socket families other than unix, inet, inet6, netlink and packet (spec.network.allowNetlink)"
	}
	add("socket", families, eperm, "spec.network", famText)
	if s.DenyNewNamespaces {
		const field = "spec.syscalls.denyNewNamespaces"
		add("unshare", newNamespaceFlags, eperm, field, "deny unshare of new namespaces")
		add("clone", newNamespaceFlags, eperm, field, "deny clone into new namespaces")
		add("setns", 0, eperm, field, "deny setns")
		add("clone3", 0, deny(seccomp.Errno(unix.ENOSYS)), field, "clone3 fails with ENOSYS (its flags are out of a filter's reach)")
	}
	slices.SortStableFunc(rules, func(a, b ruleSrc) int {
		if a.r.Nr != b.r.Nr {
			return int(a.r.Nr) - int(b.r.Nr)
		}
		return int(b.r.Arg0Any) - int(a.r.Arg0Any)
	})
	for _, r := range rules {
		f.Rules = append(f.Rules, r.r)
		id := c.addRule(event.LayerSeccomp, r.field, r.text)
		c.Syscalls = append(c.Syscalls, SyscallRule{Nr: r.r.Nr, Name: event.SyscallName(r.r.Nr), Arg0Any: r.r.Arg0Any, Action: r.r.Action.String(), RuleID: id})
	}
	prog, err := f.Program()
	if err != nil {
		return Errors{p.fail("spec.syscalls", "%v", err)}
	}
	c.Seccomp = prog
	return nil
}

// SyscallRuleFor returns the rule the filter applies to a syscall with first argument arg0,
// or false when the default action applies.
func (c *Compiled) SyscallRuleFor(nr uint32, arg0 uint64) (SyscallRule, bool) {
	for _, r := range c.Syscalls {
		if r.Nr == nr && (r.Arg0Any == 0 || uint32(arg0)&r.Arg0Any != 0) {
			return r, true
		}
	}
	return SyscallRule{}, false
}
