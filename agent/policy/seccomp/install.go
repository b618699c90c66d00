package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install flags (SECCOMP_FILTER_FLAG_*).
const (
	// TSync applies the filter to every thread of the process at once. A Go process always has
	// several threads and goroutines migrate between them, so without it only one arbitrary
	// thread would be filtered; Install therefore refuses to go without it unless the caller
	// passes NoTSync on purpose (a locked thread that is about to exec).
	TSync = uint(unix.SECCOMP_FILTER_FLAG_TSYNC)
	// LogAll makes the kernel log every non-allow action, not only RET_LOG ones.
	LogAll = uint(unix.SECCOMP_FILTER_FLAG_LOG)
	// NoTSync is not a kernel flag: it states that filtering the calling thread only is meant.
	NoTSync = uint(1 << 31)
)

// Install loads prog as a seccomp filter. Filters stack and cannot be removed: install it in the
// process that is about to exec the tool (or in the tool's launcher child), never in the agent.
//
// seccomp refuses a filter from a process without CAP_SYS_ADMIN unless no_new_privs is set,
// and no_new_privs is per thread; Install sets it on the calling thread (locked for the
// duration) and TSync carries it, with the filter, to every other thread. no_new_privs is
// wanted anyway: a setuid binary must not escape the filter's intent by gaining privileges.
func Install(prog []unix.SockFilter, flags uint) error {
	if len(prog) == 0 {
		return errors.New("seccomp: empty program")
	}
	if flags&(TSync|NoTSync) == 0 {
		return errors.New("seccomp: neither TSync nor NoTSync given: a Go process has many threads")
	}
	flags &^= NoTSync
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter of %d instructions: %w", len(prog), errno)
	}
	if r != 0 {
		// TSYNC failure returns the id of a thread that could not be synchronised
		return fmt.Errorf("seccomp: thread %d could not take the filter (it has an incompatible one)", r)
	}
	return nil
}
