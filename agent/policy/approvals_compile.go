package policy

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// CompiledApprovals is spec.approvals for one call: its rules with placeholders replaced and
// the filter that holds their syscalls (installed with a listener, beside the policy's own).
type CompiledApprovals struct {
	Timeout     time.Duration
	RetryWindow time.Duration // Approvals.RetryWindow
	Rules       []ApprovalRule
	// Filter notifies the gated syscalls and allows every other one in the filter itself:
	// a syscall no rule gates pays the filter's few instructions (the kernel's per-syscall
	// cache of always-allowed syscalls covers the rest), never a trip to the supervisor.
	Filter []unix.SockFilter
}

// Has says whether some rule gates action.
func (a *CompiledApprovals) Has(action string) bool {
	for _, r := range a.Rules {
		if r.Action == action {
			return true
		}
	}
	return false
}

// writeFlags open a file for writing: what an open of a write-gated path must be held for.
// The filter reads them from the syscall's registers, which the kernel acts on as they are:
// no pointer, no race.
const writeFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC

func (p *Policy) compileApprovals(c *Compiled, env CompileEnv) Errors {
	a := p.Spec.Approvals
	if len(a.Rules) == 0 {
		return nil
	}
	if p.Spec.Mode == Audit {
		// Audit mode blocks nothing: holding a call for a person is blocking. The rules are
		// still checked above (a policy that does not parse does not run).
		return nil
	}
	ca := &CompiledApprovals{Timeout: a.Timeout, RetryWindow: a.RetryWindow}
	if ca.Timeout <= 0 {
		ca.Timeout = DefaultApprovalTimeout
	}
	if ca.RetryWindow <= 0 {
		ca.RetryWindow = DefaultRetryWindow
	}
	for _, r := range a.Rules {
		if r.Glob != "" {
			g := r.Glob
			if strings.HasPrefix(g, Workspace) {
				g = filepath.Clean(env.Workspace) + strings.TrimPrefix(g, Workspace)
			} else if strings.HasPrefix(g, Tmp) {
				g = "/tmp" + strings.TrimPrefix(g, Tmp)
			}
			r.Glob = g
		}
		ca.Rules = append(ca.Rules, r)
	}
	notify := map[string]*seccomp.Arg{}
	gate := func(names ...string) {
		for _, n := range names {
			notify[n] = nil
		}
	}
	if ca.Has(ApproveUnlink) || ca.Has(ApproveRename) {
		// A rename moves a gated file out of its tree (then deletes it unasked) or replaces
		// one: renames are held for unlink rules too (supervise.go checks both names).
		gate("unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2")
	}
	if ca.Has(ApproveWrite) {
		// A second name outside the glob (a hard link, a rename) would let a write-gated file
		// be opened for writing unasked: links and renames are held for write rules too.
		gate("creat", "truncate", "link", "linkat", "rename", "renameat", "renameat2")
		notify["open"] = &seccomp.Arg{Index: 1, Any: writeFlags}
		notify["openat"] = &seccomp.Arg{Index: 2, Any: writeFlags}
	}
	if ca.Has(ApproveConnect) {
		gate("connect")
	}
	if ca.Has(ApproveExec) {
		// The filter cannot read the path: every exec is held, briefly for one no rule gates
		// (the supervisor reads it and lets it continue; the exec hook re-checks it).
		gate("execve", "execveat")
	}
	f := seccomp.Filter{Default: seccomp.Allow, BadArch: seccomp.KillProcess}
	for name, arg := range notify {
		nr, _ := event.SyscallNumber(name)
		f.Rules = append(f.Rules, seccomp.Rule{Nr: nr, Arg: arg, Action: seccomp.UserNotif})
	}
	// io_uring does file and socket operations without syscalls (IORING_OP_UNLINKAT,
	// RENAMEAT, OPENAT, CONNECT): no filter sees them, so a call with approval rules has no
	// io_uring. openat2 takes its flags through a pointer the filter cannot read: refused with
	// ENOSYS (what a kernel without it answers) so the C library uses openat.
	for name, e := range map[string]unix.Errno{"io_uring_setup": unix.EPERM, "openat2": unix.ENOSYS} {
		if name == "openat2" && !ca.Has(ApproveWrite) {
			continue
		}
		nr, _ := event.SyscallNumber(name)
		f.Rules = append(f.Rules, seccomp.Rule{Nr: nr, Action: seccomp.Errno(e)})
	}
	prog, err := f.Program()
	if err != nil {
		return Errors{p.fail("spec.approvals", "approval filter: %v", err)}
	}
	ca.Filter = prog
	c.Approvals = ca
	return nil
}

// Describe is the rule as a person reads it in a request.
func (r *ApprovalRule) Describe() string {
	switch r.Action {
	case ApproveExec:
		if r.Argv != nil {
			return fmt.Sprintf("exec %s argv ~ %s", r.Path, r.Argv)
		}
		return "exec " + r.Path
	case ApproveConnect:
		if r.Port != 0 {
			return fmt.Sprintf("connect %s:%d", r.CIDR, r.Port)
		}
		return "connect " + r.CIDR.String()
	}
	return r.Action + " " + r.Glob
}

// Refused says whether ev is a gated syscall the approval supervisor refused (EPERM: a deny, a
// timeout, a repeat). Its own approval and denial events say so; the judge must not name
// another layer for it. A refusal by the tool's Landlock domain, which the supervisor's
// acting thread carries, is EACCES and stays the judge's to name.
func (a *CompiledApprovals) Refused(ev *event.Event) bool {
	if a == nil {
		return false
	}
	eperm := -int64(unix.EPERM)
	switch {
	case ev.Open != nil:
		return a.Has(ApproveWrite) && ev.Open.Result == eperm && ev.Open.Flags&writeFlags != 0
	case ev.Syscall != nil:
		if ev.Syscall.Result != eperm {
			return false
		}
		switch ev.Syscall.Name {
		case "unlink", "unlinkat", "rmdir":
			return a.Has(ApproveUnlink) || a.Has(ApproveRename)
		case "rename", "renameat", "renameat2":
			return a.Has(ApproveUnlink) || a.Has(ApproveRename) || a.Has(ApproveWrite)
		case "link", "linkat":
			return a.Has(ApproveWrite)
		case "creat", "truncate":
			return a.Has(ApproveWrite)
		case "connect":
			return a.Has(ApproveConnect)
		case "execve", "execveat":
			return a.Has(ApproveExec)
		}
	case ev.Connect != nil:
		return a.Has(ApproveConnect) && ev.Connect.Result == eperm
	}
	return false
}
