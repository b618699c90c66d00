package policy

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/landlock"
)

// The refusals that replace a walk of the workspace after each call: special files
// (Landlock's make_fifo, make_sock, make_char, make_block, see compile_fs.go) and setuid or
// setgid modes (the launcher's set-id filter, sandboxer/sandboxinit/setid.go), each named
// where it happens.

// oTmpfileBit is O_TMPFILE's own bit (O_TMPFILE is it with O_DIRECTORY).
const oTmpfileBit = unix.O_TMPFILE &^ unix.O_DIRECTORY

// ruleOpenat2 names the set-id filter's answer to openat2, whose mode is out of its reach.
const ruleOpenat2 = "openat2 fails with ENOSYS: its mode is out of a seccomp filter's reach (libc falls back to openat)"

// openSetidDenial names the set-id filter's refusal of an open (open, openat, creat) that
// would create a setuid or setgid file, and its ENOSYS to openat2. The filter is the launcher's
// and applies in audit mode too: these are refusals whatever the policy's mode.
func (p *Judge) openSetidDenial(o *event.Open) *event.Denial {
	switch {
	case o.Result == -int64(unix.ENOSYS):
		// Every kernel the sandbox runs on has open, openat and creat: only openat2 is
		// answered so, by the filter.
		return &event.Denial{Layer: event.LayerSeccomp, Surface: event.SurfacePolicy, Rule: ruleOpenat2, Object: "openat2 " + o.Path}
	case o.Result == -int64(unix.EPERM) && o.Flags&(unix.O_CREAT|oTmpfileBit) != 0 && o.Mode&(unix.S_ISUID|unix.S_ISGID) != 0:
		path := o.Path
		if abs, ok := p.resolve(o.Path, o.Dirfd); ok {
			path = abs.canon
		}
		return &event.Denial{Layer: event.LayerSeccomp, Surface: event.SurfacePolicy, Rule: ruleSetID, Object: fmt.Sprintf("open %s %#o", path, o.Mode)}
	}
	return nil
}

// mknodNeed is the Landlock right a mknod asks for, by the file type in its mode.
func mknodNeed(mode uint64) uint64 {
	switch uint32(mode) & unix.S_IFMT {
	case unix.S_IFIFO:
		return landlock.MakeFifo
	case unix.S_IFSOCK:
		return landlock.MakeSock
	case unix.S_IFCHR:
		return landlock.MakeChar
	case unix.S_IFBLK:
		return landlock.MakeBlock
	}
	return landlock.MakeReg
}

const specialRights = landlock.MakeFifo | landlock.MakeSock | landlock.MakeChar | landlock.MakeBlock

// specialRule names what refuses a special file in a tree the call may write.
func specialRule(need uint64) string {
	switch need {
	case landlock.MakeChar, landlock.MakeBlock:
		return "no device nodes: make_char and make_block are never granted"
	case landlock.MakeFifo:
		return "spec.filesystem.allowSpecialFiles: false (no FIFOs: make_fifo)"
	}
	return "spec.filesystem.allowSpecialFiles: false (no unix sockets bound to a path: make_sock)"
}

// bindDenial names a unix socket bind refused by Landlock's make_sock. A bind's address is not
// in its event: an EACCES from bind is taken as this refusal when the policy refuses sockets
// (the call holds no capability, so a privileged inet port would refuse with EACCES too; the
// object says both).
func (p *Judge) bindDenial(sc *event.Syscall) *event.Denial {
	if p.audit() || sc.Result != -int64(unix.EACCES) || p.Compiled.Landlock.HandledFS&landlock.MakeSock == 0 || p.Compiled.AllowSpecialFiles {
		return nil
	}
	return &event.Denial{Layer: event.LayerLandlock, Surface: event.SurfacePolicy, Rule: specialRule(landlock.MakeSock),
		Object: fmt.Sprintf("bind(fd %d): a unix socket to a path (or an inet port below 1024)", int32(sc.Args[0]))}
}
