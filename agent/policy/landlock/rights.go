// Package landlock restricts the file system (and TCP ports, and scopes) of the calling thread
// with Landlock, for the access rights the running kernel's ABI knows.
package landlock

import "golang.org/x/sys/unix"

// File system access rights (LANDLOCK_ACCESS_FS_*).
const (
	Execute    = uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE)
	WriteFile  = uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE)
	ReadFile   = uint64(unix.LANDLOCK_ACCESS_FS_READ_FILE)
	ReadDir    = uint64(unix.LANDLOCK_ACCESS_FS_READ_DIR)
	RemoveDir  = uint64(unix.LANDLOCK_ACCESS_FS_REMOVE_DIR)
	RemoveFile = uint64(unix.LANDLOCK_ACCESS_FS_REMOVE_FILE)
	MakeChar   = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_CHAR)
	MakeDir    = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_DIR)
	MakeReg    = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_REG)
	MakeSock   = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SOCK)
	MakeFifo   = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_FIFO)
	MakeBlock  = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	MakeSym    = uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SYM)
	Refer      = uint64(unix.LANDLOCK_ACCESS_FS_REFER)     // ABI 2
	Truncate   = uint64(unix.LANDLOCK_ACCESS_FS_TRUNCATE)  // ABI 3
	IoctlDev   = uint64(unix.LANDLOCK_ACCESS_FS_IOCTL_DEV) // ABI 5
)

// Network access rights (LANDLOCK_ACCESS_NET_*, ABI 4).
const (
	BindTCP    = uint64(unix.LANDLOCK_ACCESS_NET_BIND_TCP)
	ConnectTCP = uint64(unix.LANDLOCK_ACCESS_NET_CONNECT_TCP)
)

// Scopes (LANDLOCK_SCOPE_*, ABI 6): IPC the domain may not reach outside itself.
const (
	ScopeAbstractUnix = uint64(unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
	ScopeSignal       = uint64(unix.LANDLOCK_SCOPE_SIGNAL)
)

// MaxABI is the newest ABI whose rights this package knows. A newer kernel is driven as if it
// had this ABI: rights added later are left unhandled (allowed), never guessed at.
const MaxABI = 7

// FileRights are the rights that apply to a file (not a directory); a path rule on a
// non-directory may only carry these.
const FileRights = Execute | WriteFile | ReadFile | Truncate | IoctlDev

// FSRights is every file system right the given ABI handles.
func FSRights(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	r := uint64(Execute | WriteFile | ReadFile | ReadDir | RemoveDir | RemoveFile | MakeChar |
		MakeDir | MakeReg | MakeSock | MakeFifo | MakeBlock | MakeSym)
	if abi >= 2 {
		r |= Refer
	}
	if abi >= 3 {
		r |= Truncate
	}
	if abi >= 5 {
		r |= IoctlDev
	}
	return r
}

// NetRights is every network right the given ABI handles.
func NetRights(abi int) uint64 {
	if abi >= 4 {
		return BindTCP | ConnectTCP
	}
	return 0
}

// Scopes is every scope the given ABI handles.
func Scopes(abi int) uint64 {
	if abi >= 6 {
		return ScopeAbstractUnix | ScopeSignal
	}
	return 0
}

var fsNames = []struct {
	bit  uint64
	name string
}{
	{Execute, "execute"}, {WriteFile, "write_file"}, {ReadFile, "read_file"}, {ReadDir, "read_dir"},
	{RemoveDir, "remove_dir"}, {RemoveFile, "remove_file"}, {MakeChar, "make_char"},
	{MakeDir, "make_dir"}, {MakeReg, "make_reg"}, {MakeSock, "make_sock"}, {MakeFifo, "make_fifo"},
	{MakeBlock, "make_block"}, {MakeSym, "make_sym"}, {Refer, "refer"}, {Truncate, "truncate"},
	{IoctlDev, "ioctl_dev"},
}

// FSNames spells a file system access mask, for messages and audit records.
func FSNames(access uint64) []string {
	var out []string
	for _, n := range fsNames {
		if access&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	return out
}
