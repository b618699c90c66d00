package landlock

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ruleset is what Restrict enforces. Handled* say which rights the domain governs at all: a
// handled right is denied everywhere except where a rule grants it; an unhandled one is left
// alone. Rights above the running kernel's ABI make Restrict fail rather than be dropped
// silently, so callers mask with FSRights/NetRights/Scopes of the probed ABI.
type Ruleset struct {
	HandledFS  uint64
	HandledNet uint64
	Scoped     uint64
	Paths      []PathRule
	Ports      []PortRule
}

// PathRule grants Access beneath Path (the path itself when it is not a directory).
type PathRule struct {
	Path   string
	Access uint64
}

// PortRule grants Access (BindTCP, ConnectTCP) on a TCP port.
type PortRule struct {
	Port   uint16
	Access uint64
}

// The kernel's struct landlock_ruleset_attr up to ABI 7 (x/sys carries newer fields that older
// kernels reject unless zero; sending only what we use keeps the size honest).
type rulesetAttr struct {
	handledFS  uint64
	handledNet uint64
	scoped     uint64
}

// struct landlock_path_beneath_attr is packed: 12 bytes.
type pathBeneathAttr struct {
	allowed  uint64
	parentFD int32
}

type netPortAttr struct {
	allowed uint64
	port    uint64
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

// Probe returns the Landlock ABI version of the running kernel. An error means Landlock is not
// usable (not built in, or not enabled in the lsm= list).
func Probe() (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		switch errno {
		case unix.ENOSYS:
			return 0, fmt.Errorf("landlock: not supported by this kernel: %w", errno)
		case unix.EOPNOTSUPP:
			return 0, fmt.Errorf("landlock: disabled at boot (not in lsm=): %w", errno)
		}
		return 0, fmt.Errorf("landlock: probe abi: %w", errno)
	}
	return int(abi), nil
}

// Restrict confines the calling thread, and every process it later starts, to rs. It sets
// no_new_privs on the thread first (Landlock requires it without CAP_SYS_ADMIN).
//
// Landlock restrict_self acts on the calling thread only (ABI 8 adds a TSYNC flag; ABI 7 has
// none), so a Go caller must runtime.LockOSThread before calling and start the tool (fork and
// exec) from the same locked goroutine, and must never unlock that thread: the runtime then
// retires the restricted thread when the goroutine exits instead of reusing it. The usual
// shape is a re-executed launcher child that restricts itself just before exec.
//
// Paths are opened with RESOLVE_NO_SYMLINKS: a rule path is meant to be canonical already
// (policy.Compile makes it so), and a symlink appearing there since means someone swapped it.
func Restrict(rs Ruleset) error {
	fd, err := createRuleset(rs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, p := range rs.Paths {
		err := addPath(fd, p)
		if errors.Is(err, unix.ENOENT) {
			// Removed since the policy was compiled (a compile lists whole directories such
			// as /etc, which the host changes when it likes): no rule, which grants less,
			// never more. A file made later under the name is not granted either.
			continue
		}
		if err != nil {
			return err
		}
	}
	for _, p := range rs.Ports {
		attr := netPortAttr{allowed: p.Access, port: uint64(p.Port)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), landlockRuleNetPort,
			uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock: add port rule %d: %w", p.Port, errno)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict self: %w", errno)
	}
	return nil
}

func createRuleset(rs Ruleset) (int, error) {
	if rs.HandledFS == 0 && rs.HandledNet == 0 && rs.Scoped == 0 {
		return -1, errors.New("landlock: empty ruleset: nothing handled")
	}
	attr := rulesetAttr{handledFS: rs.HandledFS, handledNet: rs.HandledNet, scoped: rs.Scoped}
	size := unsafe.Sizeof(attr)
	// Older kernels reject a larger struct whose tail they do not know, even when it is zero.
	if rs.Scoped == 0 {
		size = unsafe.Offsetof(attr.scoped)
		if rs.HandledNet == 0 {
			size = unsafe.Offsetof(attr.handledNet)
		}
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock: create ruleset (fs %#x net %#x scoped %#x): %w",
			rs.HandledFS, rs.HandledNet, rs.Scoped, errno)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

func addPath(rulesetFD int, p PathRule) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, p.Path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("landlock: open rule path %s: %w", p.Path, err)
	}
	defer unix.Close(fd)
	attr := pathBeneathAttr{allowed: p.Access, parentFD: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: add rule %s %v: %w", p.Path, FSNames(p.Access), errno)
	}
	return nil
}
