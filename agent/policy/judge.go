package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/landlock"
)

// Judge names the denials the kernel does not report itself (Landlock's, seccomp's, the mount
// layer's) from a call's events: it recovers them from the syscall exit path, and in audit mode
// judges every traced action against the policy. The sandboxer builds one per call and hands
// it to the agent, which knows it only as an interface: the agent never reasons about policy.
type Judge struct {
	Compiled  *Compiled
	Workspace string
	Deny      []string // the policy's deny entries, placeholders substituted, for attribution
	Masked    []string // host mount points inside the workspace, masked in the call
	// MaskedLinks are workspace files that are hard links to files outside it, masked.
	MaskedLinks []string
	Roots       []string // top-level trees the call's root shows (binds), for "not in the root"
	// NoExec: the writable trees are noexec and memfds not executable (see judge_noexec.go).
	NoExec bool

	// resolved caches canonical forms: an import-heavy tool probes the same directories
	// hundreds of times. Only the call's worker judges its events, so no lock.
	resolved resolver
}

const maxResolved = 4096

func (p *Judge) audit() bool { return p.Compiled.Mode == Audit }

// resolve makes an event's path absolute as the call sees it. Relative paths are taken against
// the workspace, the call's working directory (a tool that chdirs elsewhere is attributed
// approximately; the kernel decision itself is exact).
func (p *Judge) resolve(path string, dirfd int32) (resolution, bool) {
	if path == "" {
		return resolution{}, false
	}
	if !filepath.IsAbs(path) {
		if dirfd != unix.AT_FDCWD {
			return resolution{}, false
		}
		path = filepath.Join(p.Workspace, path)
	}
	return p.resolved.canonicalOf(filepath.Clean(path)), true
}

func (p *Judge) masked(path string) bool {
	for _, m := range p.Masked {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

func (p *Judge) maskedLink(path string) bool {
	for _, m := range p.MaskedLinks {
		if path == m {
			return true
		}
	}
	return false
}

func (p *Judge) inRoot(path string) bool {
	if strings.HasPrefix(path, "/proc/") || strings.HasPrefix(path, "/dev/") || strings.HasPrefix(path, "/tmp/") || path == "/tmp" ||
		path == p.Workspace || strings.HasPrefix(path, p.Workspace+"/") {
		return true
	}
	for _, r := range p.Roots {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// fsRule names what refuses access to path: the deny entry covering it, or the default deny.
func (p *Judge) fsRule(path string, need uint64) string {
	inWorkspace := path == p.Workspace || strings.HasPrefix(path, p.Workspace+"/")
	for i, d := range p.Deny {
		// A grant strictly inside a denied tree (a workspace under /run) stays granted: the
		// deny entry is not what refused it.
		if inWorkspace && strings.HasPrefix(p.Workspace, d+"/") {
			continue
		}
		if path == d || strings.HasPrefix(path, d+"/") {
			return fmt.Sprintf("spec.filesystem.deny[%d] %s", i, d)
		}
	}
	return "default deny: no " + rightName(need) + " grant covers it"
}

func rightName(need uint64) string {
	switch {
	case need&landlock.Execute != 0:
		return "exec"
	case need&(landlock.WriteFile|landlock.MakeReg|landlock.MakeDir|landlock.RemoveFile|landlock.RemoveDir|landlock.Truncate) != 0:
		return "write"
	}
	return "read"
}

// openNeed is the Landlock right an open asks for.
func openNeed(flags uint32) uint64 {
	var need uint64
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		need = landlock.ReadFile
		if flags&unix.O_DIRECTORY != 0 {
			need = landlock.ReadDir
		}
	case unix.O_WRONLY:
		need = landlock.WriteFile
	default:
		need = landlock.ReadFile | landlock.WriteFile
	}
	if flags&unix.O_TRUNC != 0 {
		need |= landlock.Truncate
	}
	return need
}

// pathSyscallNeed is the right a path syscall asks for on its (first) path.
var pathSyscallNeed = map[string]uint64{
	"unlink": landlock.RemoveFile, "unlinkat": landlock.RemoveFile, "rmdir": landlock.RemoveDir,
	"rename": landlock.RemoveFile, "renameat": landlock.RemoveFile, "renameat2": landlock.RemoveFile,
	"mkdir": landlock.MakeDir, "mkdirat": landlock.MakeDir, "mknod": landlock.MakeReg, "mknodat": landlock.MakeReg,
	"link": landlock.MakeReg, "linkat": landlock.MakeReg, "symlink": landlock.MakeSym, "symlinkat": landlock.MakeSym,
	"truncate": landlock.Truncate, "execve": landlock.Execute, "execveat": landlock.Execute,
}

// runtimeProbes are where language runtimes and libraries read the machine's shape to size
// themselves (CPUs, NUMA nodes, cgroup memory and CPU limits: node, the JVM, Go, Python's
// multiprocessing). The call's root has no /sys, so they find nothing and take their defaults:
// read-only facts of the machine, not a user's, and not a refusal the tool meant to meet.
var runtimeProbes = []string{"/sys/fs/cgroup/", "/sys/fs/berm/", "/sys/devices/system/cpu/", "/sys/devices/system/node/"}

// withheld says whether a path missing from the call's root withholds something: a write
// there is always refused something; a read only when the host has the path (a program
// looking for ~/.curlrc or a locale file that exists nowhere is told the truth, not refused),
// and it is not a runtime probe. Whether the host has it is asked without waiting on a slow
// file system (judge_resolve.go): a path the judge will not look up (on one, or past the
// budget) is taken as withheld, as its string says it may be.
func (p *Judge) withheld(res resolution, need uint64) (withheld bool, why string) {
	if need&^(landlock.ReadFile|landlock.ReadDir) != 0 {
		return true, ""
	}
	for _, pr := range runtimeProbes {
		if strings.HasPrefix(res.canon, pr) {
			return false, ""
		}
	}
	exists, ok := p.resolved.exists(res)
	if !ok && res.unresolved() == "" {
		why = notLookedUp // the budget ran out at this look-up: say so
	}
	return exists || !ok, why
}

func denied(ret int64) bool { return ret == -int64(unix.EACCES) || ret == -int64(unix.EPERM) }

// Denial returns the denial an event shows, if any. Only the call's decoder goroutine calls
// it (the path cache is not locked).
func (p *Judge) Denial(ev *event.Event) *event.Denial {
	audit := p.audit()
	fs := func(res resolution, need uint64, ret int64) *event.Denial {
		d := p.fsDenial(res, need, ret, audit)
		if why := res.unresolved(); d != nil && why != "" {
			d.Rule += " (" + why + ")"
		}
		return d
	}
	if p.Compiled.Approvals.Refused(ev) {
		return nil // the approval supervisor's answer: it recorded its own denial
	}
	switch {
	case ev.Open != nil:
		if !audit && ev.Open.Result >= 0 {
			return nil
		}
		if d := p.openSetidDenial(ev.Open); d != nil {
			return d
		}
		// The kernel's path of what was opened, or of the directory a relative path was
		// resolved against (after a chdir, not the workspace): no guess from the workspace.
		given, dirfd := ev.Open.Path, ev.Open.Dirfd
		if ev.Open.ResolvedPath != "" {
			given, dirfd = ev.Open.ResolvedPath, unix.AT_FDCWD
		}
		res, ok := p.resolve(given, dirfd)
		if !ok {
			return nil
		}
		return fs(res, openNeed(ev.Open.Flags), ev.Open.Result)
	case ev.Exec != nil && audit:
		res, ok := p.resolve(ev.Exec.Filename, unix.AT_FDCWD)
		if !ok {
			return nil
		}
		return fs(res, landlock.Execute, 0)
	case ev.Syscall != nil:
		sc := ev.Syscall
		// The arguments are the registers at the syscall's exit, the ones the filter read at
		// its entry: the rule found here is the filter's decision. The filter runs before the
		// kernel's own checks (noexec mounts, vm.memfd_noexec), so its refusal names first.
		if r, ok := p.Compiled.SyscallRuleFor(sc.Nr, sc.Args); ok && r.Action != "allow" {
			if r.Fallback {
				return nil // the program's normal path: it goes on another way, which is judged
			}
			rule := r.Name
			if cr, ok := p.Compiled.RuleByID(r.RuleID); ok {
				rule = cr.Field + ": " + cr.Text
			}
			// A killed call never returns: its exit shows the syscall number (rolled back for
			// the core dump), not an errno.
			if audit || r.Action == "kill" || r.Errno != 0 && sc.Result == -int64(r.Errno) {
				return &event.Denial{Layer: event.LayerSeccomp, Surface: event.SurfacePolicy, Rule: rule, Object: sc.Name, Audit: audit}
			}
			return nil
		}
		if d := p.noexecDenial(sc); d != nil {
			return d
		}
		if sc.Name == "bind" {
			return p.bindDenial(sc)
		}
		// Raw and packet sockets are refused by the capability check before any cgroup hook
		// runs (the call has no CAP_NET_RAW): name that refusal here.
		if sc.Name == "socket" && (denied(sc.Result) || audit) {
			family, typ := uint16(sc.Args[0]), int(sc.Args[1]&0xf)
			if (typ == unix.SOCK_RAW || family == unix.AF_PACKET) && !p.Compiled.Network.SocketAllowed(family, typ) {
				return &event.Denial{Layer: event.LayerCapabilities, Surface: event.SurfacePolicy, Audit: audit && sc.Result >= 0,
					Rule:   "raw and packet sockets are not allowed (no CAP_NET_RAW, not in spec.network)",
					Object: fmt.Sprintf("socket(family %d, type %d, protocol %d)", family, typ, sc.Args[2])}
			}
			return nil
		}
		need, ok := pathSyscallNeed[sc.Name]
		if !ok || sc.Path == "" || (!audit && sc.Result >= 0) {
			return nil
		}
		dirfd := int32(unix.AT_FDCWD)
		if strings.HasSuffix(sc.Name, "at") || strings.HasSuffix(sc.Name, "at2") {
			dirfd = int32(sc.Args[0])
		}
		res, ok := p.resolve(sc.Path, dirfd)
		if !ok {
			// Relative to a directory descriptor (rm -rf walks with unlinkat(fd, name)): the
			// refusal is the kernel's; the rule cannot be named without the directory.
			if !audit && denied(sc.Result) {
				return &event.Denial{Layer: event.LayerLandlock, Surface: event.SurfacePolicy, Rule: "default deny (path relative to an open directory)", Object: sc.Path}
			}
			return nil
		}
		if sc.Name == "unlinkat" && sc.Args[2]&unix.AT_REMOVEDIR != 0 {
			need = landlock.RemoveDir
		}
		switch sc.Name {
		case "mknod":
			need = mknodNeed(sc.Args[1])
		case "mknodat":
			need = mknodNeed(sc.Args[2])
		}
		return fs(res, need, sc.Result)
	}
	return nil
}

// fsDenial names what refused (or, in audit mode, would refuse) need on a resolved path.
func (p *Judge) fsDenial(res resolution, need uint64, ret int64, audit bool) *event.Denial {
	path := res.canon
	switch {
	case p.maskedLink(path):
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: "hard link to a file outside the workspace (masked)", Object: path, Audit: audit}
	case p.masked(path) && (ret < 0 || audit):
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: "sub-mount of the workspace is not part of the call (masked)", Object: path, Audit: audit && ret >= 0}
	case ret == -int64(unix.EROFS) && !audit:
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: "read-only in the call's root", Object: path}
	case ret == -int64(unix.ENOENT) && !p.inRoot(path):
		w, why := p.withheld(res, need)
		if !w {
			break
		}
		rule := "not in the call's root"
		if why != "" {
			rule += " (" + why + ")"
		}
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: rule, Object: path, Audit: audit}
	}
	if p.Compiled.Landlock.HandledFS&need == 0 || p.Compiled.FSAccess(path)&need == need {
		return nil
	}
	rule := p.fsRule(path, need)
	if need&specialRights != 0 {
		rule = specialRule(need) // no tree grants it: the special file is what is refused
	}
	if audit {
		return &event.Denial{Layer: event.LayerLandlock, Surface: event.SurfacePolicy, Rule: rule, Object: path, Audit: true}
	}
	if denied(ret) {
		return &event.Denial{Layer: event.LayerLandlock, Surface: event.SurfacePolicy, Rule: rule, Object: path}
	}
	return nil
}
