package sandboxer

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// callEnv is a policy compiled for one call: what the init enforces and what the agent needs
// to name denials.
type callEnv struct {
	compiled *policy.Compiled // shared with other calls (the compile cache): read only
	hash     string           // compiled.Hash()
	init     sandboxinit.Config
	judge    *policy.Judge
	traced   []uint32
	// refusalsOnly: of traced, those reported only when refused (tracer.CallConfig).
	refusalsOnly []uint32
	// wsNoExec mounts the workspace noexec: the policy grants no exec there.
	wsNoExec bool
	// redact are the policy's output patterns (spec.output.redact), compiled.
	redact []secrets.Pattern
}

// recompile compiles the spec's policy again for the running call (hot reload), against the
// same workspace and kernel.
func recompile(spec *Spec, abi int) (*policy.Compiled, error) {
	return spec.Policy.Compile(policy.CompileEnv{
		Workspace: spec.Workspace, Tmp: "/tmp", LandlockABI: abi, MountInfo: sandboxMountInfo(spec.Workspace),
	})
}

// compile turns the spec's policy into this call's enforcement. Fails closed: a layer the
// policy needs and the kernel lacks stops the call before it starts.
func compile(spec *Spec) (*callEnv, error) {
	abi, err := landlock.Probe()
	if err != nil || abi < 1 {
		return nil, fmt.Errorf("landlock is not available (%v): the filesystem policy cannot be enforced; refusing to run", err)
	}
	cp, err := policyCompiles.compile(spec.Policy, spec.Workspace, abi)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", spec.Policy.Metadata.Name, err)
	}
	c, plan := cp.compiled, cp.plan
	env := &callEnv{compiled: c, hash: cp.hash}
	for i, p := range spec.Policy.Spec.Output.Redact {
		sp, err := secrets.CompilePattern(p.Name, p.Regex, p.End)
		if err != nil {
			return nil, fmt.Errorf("policy %s: spec.output.redact[%d]: %w", spec.Policy.Metadata.Name, i, err)
		}
		env.redact = append(env.redact, sp)
	}
	env.init = sandboxinit.Config{
		Argv: spec.Argv, Env: spec.Env, Workspace: spec.Workspace, Hostname: hostname(spec.CallID),
		TmpBytes: spec.Limits.TmpBytes, TmpInodes: c.Limits.TmpInodes, NewNet: c.Isolation == policy.NetworkNone, Root: plan,
		Seccomp: c.Seccomp,
	}
	if c.Approvals != nil {
		env.init.Approvals = c.Approvals.Filter
		env.init.ApprovalConnect = c.Approvals.Has(policy.ApproveConnect)
	}
	if c.Mode == policy.Enforce {
		rs := c.Landlock
		env.init.Landlock = &rs
		// Writable is not executable where the policy grants no exec: the loader (ld.so
		// ./payload) and LD_PRELOAD map with PROT_EXEC, which Landlock does not see and a
		// noexec mount refuses; an executable memfd needs no path at all.
		env.wsNoExec = c.FSAccess(spec.Workspace)&landlock.Execute == 0
		env.init.TmpNoExec = c.FSAccess("/tmp")&landlock.Execute == 0
		env.init.MemfdNoExec = env.wsNoExec && env.init.TmpNoExec
	} else {
		env.init.HostRoot = true
	}
	judge := &policy.Judge{Compiled: c, Workspace: spec.Workspace, Masked: plan.Masked, NoExec: env.init.MemfdNoExec}
	for _, d := range spec.Policy.Spec.Filesystem.Deny {
		d = strings.ReplaceAll(strings.ReplaceAll(d, "${WORKSPACE}", spec.Workspace), "${TMP}", "/tmp")
		judge.Deny = append(judge.Deny, filepath.Clean(d))
	}
	judge.Roots = cp.roots
	env.judge = judge

	// Traced one by one: the defaults, what the caller asked for, every syscall the policy
	// refuses (so each refusal is in the timeline) and failed execs.
	seen := map[uint32]bool{}
	add := func(nr uint32) {
		if !seen[nr] {
			seen[nr] = true
			env.traced = append(env.traced, nr)
		}
	}
	for _, n := range event.DefaultTraced {
		if nr, err := event.SyscallNumber(n); err == nil {
			add(nr)
		}
	}
	for _, nr := range spec.Traced {
		add(nr)
	}
	// A rule narrowed to some arguments (ioctl's TIOCSTI) refuses few of the syscall's calls:
	// in enforce mode only those are reported, unless the syscall is traced anyway. In audit
	// mode every call is reported: the would-be refusals succeed.
	narrowed := map[uint32]bool{}
	for _, r := range c.Syscalls {
		if r.Action != "allow" && r.Nr < 512 {
			if r.Arg != nil && r.Errno == unix.EPERM && c.Mode == policy.Enforce && !seen[r.Nr] {
				narrowed[r.Nr] = true
			} else if r.Arg == nil {
				delete(narrowed, r.Nr) // a whole-syscall rule of the same syscall: all of it
			}
			add(r.Nr)
		}
	}
	for nr := range narrowed {
		env.refusalsOnly = append(env.refusalsOnly, nr)
	}
	// A unix socket bound to a path is refused by Landlock (make_sock) when the policy makes
	// no special files: bind is traced so that the refusal is in the timeline.
	if !c.AllowSpecialFiles {
		add(unix.SYS_BIND)
	}
	exec := []string{"execve", "execveat"}
	if env.init.MemfdNoExec {
		// Only their refusals are reported (PROT_EXEC on a noexec mount, MFD_EXEC).
		exec = append(exec, "mmap", "mprotect", "memfd_create")
	}
	for _, n := range exec {
		nr, _ := event.SyscallNumber(n)
		add(nr)
	}
	return env, nil
}

// hostname is the call's host name: "berm-" and its id, cut to the 64 bytes a UTS name
// holds (an id may be 64 characters long; the cgroup and the record carry it whole).
func hostname(callID string) string {
	h := "berm-" + callID
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}
