package policy

import (
	"fmt"
	"regexp"

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

func (p *Judge) noexecDenial(sc *event.Syscall) *event.Denial {
	if !p.NoExec || !denied(sc.Result) {
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
		return &event.Denial{Layer: "mount", Surface: "policy", Rule: ruleNoexecMount, Object: obj}
	case "memfd_create":
		if sc.Args[1]&mfdExec == 0 {
			return nil
		}
		return &event.Denial{Layer: "mount", Surface: "policy", Rule: ruleNoexecMemfd, Object: "memfd_create(MFD_EXEC) " + sc.Path}
	case "execve", "execveat":
		if sc.Name == "execveat" && sc.Path == "" && sc.Args[4]&unix.AT_EMPTY_PATH != 0 {
			return &event.Denial{Layer: "mount", Surface: "policy", Rule: ruleNoexecMemfd + " (or a noexec mount)", Object: fmt.Sprintf("execveat of fd %d", int32(sc.Args[0]))}
		}
		if fdPath.MatchString(sc.Path) {
			return &event.Denial{Layer: "mount", Surface: "policy", Rule: ruleNoexecMemfd + " (or a noexec mount)", Object: sc.Path}
		}
	}
	return nil
}
