package policy

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// SyscallRule is what the filter does to one syscall (Arg: only to the calls whose argument
// passes its test).
type SyscallRule struct {
	Nr     uint32
	Name   string
	Arg    *seccomp.Arg
	Action string     // as seccomp.Action spells it: "errno EPERM", "log", "allow", "kill"
	Errno  unix.Errno // what a refused call returns; 0 for the other actions
	RuleID uint32
	// Fallback: the answer is one programs take as "not supported here" and fall back from
	// on their normal path (glibc's clone3 answered ENOSYS goes on with clone, whose flags
	// the filter reads): not a denial of anything the program meant to do.
	Fallback bool
}

// newNamespaceFlags are the CLONE_NEW* flags; all fit in the low 32 bits the filter reads.
const newNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

const fieldDenyNewNamespaces = "spec.syscalls.denyNewNamespaces"

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
	add := func(name string, arg *seccomp.Arg, a seccomp.Action, field, text string) {
		nr, _ := event.SyscallNumber(name) // names were validated when parsing
		if arg == nil {
			if i, ok := whole[nr]; ok {
				rules[i] = ruleSrc{seccomp.Rule{Nr: nr, Action: a}, field, text} // a later, stricter source wins
				return
			}
			whole[nr] = len(rules)
		}
		rules = append(rules, ruleSrc{seccomp.Rule{Nr: nr, Arg: arg, Action: a}, field, text})
	}
	defaultRefuses := false
	if len(s.Allow) > 0 {
		switch s.DefaultAction {
		case ActionKill:
			f.Default, defaultRefuses = deny(seccomp.KillProcess), true
		case ActionLog:
			f.Default = seccomp.Log
		default:
			f.Default, defaultRefuses = eperm, true
		}
		for i, name := range s.Allow {
			add(name, nil, seccomp.Allow, fmt.Sprintf("spec.syscalls.allow[%d]", i), "allow "+name)
		}
	}
	for i, name := range s.Deny {
		add(name, nil, eperm, fmt.Sprintf("spec.syscalls.deny[%d]", i), "deny "+name)
	}
	// Socket families, an exact allowlist. The cgroup hooks only ever see inet sockets: this
	// is where every other family is refused, before the kernel runs (or loads the module of)
	// its code. EAFNOSUPPORT, not EPERM: it is what a kernel built without the family answers,
	// so programs that probe for one (glibc's getaddrinfo asks netlink, runtimes probe vsock)
	// take their fallback path; systemd's RestrictAddressFamilies= answers the same.
	// socketpair creates its sockets through the family too, and only unix implements it.
	families := []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}
	famText := "socket families other than unix, inet and inet6 fail with EAFNOSUPPORT"
	if p.Spec.Network.AllowNetlink {
		families = append(families, unix.AF_NETLINK)
		famText = "socket families other than unix, inet, inet6 and netlink fail with EAFNOSUPPORT"
	}
	noFamily := deny(seccomp.Errno(unix.EAFNOSUPPORT))
	add("socket", &seccomp.Arg{NotIn: families}, noFamily, "spec.network.allowNetlink", famText)
	add("socketpair", &seccomp.Arg{NotIn: []uint32{unix.AF_UNIX}}, noFamily, "spec.network.allowNetlink",
		"socketpair families other than unix fail with EAFNOSUPPORT")
	if s.DenyNewNamespaces {
		const field = fieldDenyNewNamespaces
		ns := &seccomp.Arg{Any: newNamespaceFlags}
		add("unshare", ns, eperm, field, "deny unshare of new namespaces")
		add("clone", ns, eperm, field, "deny clone into new namespaces")
		add("setns", nil, eperm, field, "deny setns")
		add("clone3", nil, deny(seccomp.Errno(unix.ENOSYS)), field, "clone3 fails with ENOSYS (its flags are out of a filter's reach)")
	}
	if s.DenyTerminalInjection {
		add("ioctl", &seccomp.Arg{Index: 1, In: []uint32{unix.TIOCSTI, unix.TIOCLINUX}}, eperm,
			"spec.syscalls.denyTerminalInjection", "deny ioctl TIOCSTI and TIOCLINUX (typing into a terminal)")
	}
	if s.DenyFileWatch {
		for _, name := range []string{"inotify_init", "inotify_init1", "fanotify_init"} {
			add(name, nil, eperm, "spec.syscalls.denyFileWatch", "deny "+name+" (watching files shared with the host and other calls)")
		}
	}
	if s.DenyExecutableMemfd {
		const field = "spec.syscalls.denyExecutableMemfd"
		add("memfd_create", &seccomp.Arg{Index: 1, Any: unix.MFD_EXEC}, eperm, field, "deny memfd_create with MFD_EXEC (an executable memfd)")
		add("execveat", &seccomp.Arg{Index: 4, Any: unix.AT_EMPTY_PATH}, eperm, field, "deny execveat with AT_EMPTY_PATH (running a descriptor: fexecve)")
	}

	// Fatal syscalls: every refusal of one becomes a kill by the filter itself, so it does not
	// depend on an event reaching the agent.
	var errs Errors
	for i, name := range s.Fatal {
		field := fmt.Sprintf("spec.syscalls.fatal[%d]", i)
		nr, _ := event.SyscallNumber(name)
		refused := false
		for j := range rules {
			if r := &rules[j]; r.r.Nr == nr && r.r.Action != seccomp.Allow {
				r.r.Action = deny(seccomp.KillProcess)
				r.text += "; fatal (" + field + ")"
				refused = true
			}
		}
		if _, listed := whole[nr]; !refused && !listed && defaultRefuses {
			add(name, nil, deny(seccomp.KillProcess), field, "fatal "+name+" (not in spec.syscalls.allow)")
			refused = true
		}
		if !refused {
			errs = append(errs, p.fail(field, "%s is not denied by this policy: only a refused attempt can be fatal", name))
			continue
		}
		if c.Fatal == nil {
			c.Fatal = map[uint32]bool{}
		}
		c.Fatal[nr] = true
	}
	if len(errs) > 0 {
		return errs
	}

	slices.SortStableFunc(rules, func(a, b ruleSrc) int { return seccomp.CompareRules(a.r, b.r) })
	for _, r := range rules {
		f.Rules = append(f.Rules, r.r)
		id := c.addRule(event.LayerSeccomp, r.field, r.text)
		errno, _ := r.r.Action.IsErrno()
		fallback := r.field == fieldDenyNewNamespaces && event.SyscallName(r.r.Nr) == "clone3" && r.r.Action != seccomp.KillProcess
		c.Syscalls = append(c.Syscalls, SyscallRule{Nr: r.r.Nr, Name: event.SyscallName(r.r.Nr), Arg: r.r.Arg,
			Action: r.r.Action.String(), Errno: errno, RuleID: id, Fallback: fallback})
	}
	prog, err := f.Program()
	if err != nil {
		return Errors{p.fail("spec.syscalls", "%v", err)}
	}
	c.Seccomp = prog
	return nil
}

// SyscallRuleFor returns the rule the filter applies to a syscall with these arguments, or
// false when the default action applies. Rules are in the filter's order: the first match is
// the filter's decision.
func (c *Compiled) SyscallRuleFor(nr uint32, args [6]uint64) (SyscallRule, bool) {
	for _, r := range c.Syscalls {
		if r.Nr == nr && r.Arg.Matches(args) {
			return r, true
		}
	}
	return SyscallRule{}, false
}

// FatalEnd is the end detail of a call whose tool died of SIGSYS under a policy with fatal
// syscalls: the seccomp filter killed it. seen is the fatal syscall the agent saw refused
// ("" when its event was lost: then the detail says which ones it may have been). ok is false
// when the policy has no fatal syscall or is in audit mode (SIGSYS is then another cause's).
func (c *Compiled) FatalEnd(seen string) (detail string, ok bool) {
	if len(c.Fatal) == 0 || c.Mode == Audit {
		return "", false
	}
	if seen != "" {
		return "fatal syscall attempted: " + seen + " (spec.syscalls.fatal; killed by the seccomp filter)", true
	}
	var names []string
	for nr := range c.Fatal {
		names = append(names, event.SyscallName(nr))
	}
	slices.Sort(names)
	if len(names) == 1 {
		return "fatal syscall attempted: " + names[0] + " (spec.syscalls.fatal; killed by the seccomp filter, its event was not seen)", true
	}
	return fmt.Sprintf("a spec.syscalls.fatal syscall attempted (one of %v; killed by the seccomp filter, its event was not seen)", names), true
}
