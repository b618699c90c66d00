package policy

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// Where the policy grants no exec on a writable tree, the launcher mounts the workspace and
// /tmp noexec and sets vm.memfd_noexec=2 in the call's pid namespace: what the tool can write
// it cannot run, not through the loader (ld.so ./payload), not through LD_PRELOAD, not from a
// memfd. The kernel refuses those with EPERM or EACCES from mmap, memfd_create and execve;
// these name the refusal.
const (
	ruleNoexecMount = "noexec: the workspace and /tmp are mounted noexec (the policy grants no exec there)"
	ruleNoexecMemfd = "vm.memfd_noexec=2 in the call's pid namespace: no executable memfd"
	mfdExec         = 0x10 // MFD_EXEC
)

// fdPath is an exec through a file descriptor's magic link (fexecve of a memfd).
var fdPath = regexp.MustCompile(`^/(proc/(self|thread-self|[0-9]+)|dev)/fd/[0-9]+$`)

// ruleSetID: the launcher's own filter refuses setuid and setgid bits on every call's files:
// through the workspace's idmapped mount they would belong to its owner on the host.
const ruleSetID = "no setuid or setgid bits: the call's files belong to the workspace's owner on the host"

func (p *Judge) noexecDenial(sc *event.Syscall) *event.Denial {
	if !denied(sc.Result) {
		return nil
	}
	if mode, ok := chmodMode(sc); ok && mode&(unix.S_ISUID|unix.S_ISGID) != 0 && sc.Result == -int64(unix.EPERM) {
		path, dirfd := sc.Path, int32(unix.AT_FDCWD)
		if strings.HasPrefix(sc.Name, "fchmodat") || sc.Name == "mknodat" || sc.Name == "mkdirat" {
			dirfd = int32(sc.Args[0])
		}
		if abs, ok := p.resolve(sc.Path, dirfd); ok {
			path = abs.canon
		}
		return &event.Denial{Layer: event.LayerSeccomp, Surface: event.SurfacePolicy, Rule: ruleSetID, Object: fmt.Sprintf("%s %s %#o", sc.Name, path, mode)}
	}
	if !p.NoExec {
		return nil
	}
	switch sc.Name {
	case "mmap", "mprotect", "pkey_mprotect":
		if sc.Args[2]&unix.PROT_EXEC == 0 {
			return nil
		}
		obj := fmt.Sprintf("%s(PROT_EXEC)", sc.Name)
		if sc.Name == "mmap" {
			obj = fmt.Sprintf("mmap(PROT_EXEC) of fd %d", int32(sc.Args[4]))
		}
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: ruleNoexecMount, Object: obj}
	case "memfd_create":
		if sc.Args[1]&mfdExec == 0 {
			return nil
		}
		return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: ruleNoexecMemfd, Object: "memfd_create(MFD_EXEC) " + sc.Path}
	case "execve", "execveat":
		if sc.Name == "execveat" && sc.Path == "" && sc.Args[4]&unix.AT_EMPTY_PATH != 0 {
			return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: ruleNoexecMemfd + " (or a noexec mount)", Object: fmt.Sprintf("execveat of fd %d", int32(sc.Args[0]))}
		}
		if fdPath.MatchString(sc.Path) {
			return &event.Denial{Layer: event.LayerMount, Surface: event.SurfacePolicy, Rule: ruleNoexecMemfd + " (or a noexec mount)", Object: sc.Path}
		}
	}
	return nil
}

// chmodMode is the mode a chmod-family call asks for, or a mknod or mkdir gives what it makes
// (the launcher's set-id filter refuses all of them with S_ISUID or S_ISGID).
func chmodMode(sc *event.Syscall) (uint64, bool) {
	switch sc.Name {
	case "chmod", "fchmod", "mknod", "mkdir":
		return sc.Args[1], true
	case "fchmodat", "fchmodat2", "mknodat", "mkdirat":
		return sc.Args[2], true
	}
	return 0, false
}
