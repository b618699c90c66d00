package event

import (
	"fmt"
	"sort"
	"strconv"
)

var syscallNumbers = func() map[string]uint32 {
	m := make(map[string]uint32, len(syscallNames))
	for nr, name := range syscallNames {
		m[name] = nr
	}
	return m
}()

// SyscallName names an x86-64 syscall number ("sys_N" for an unknown one).
func SyscallName(nr uint32) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	return "sys_" + strconv.FormatUint(uint64(nr), 10)
}

// SyscallNumber resolves a syscall name.
func SyscallNumber(name string) (uint32, error) {
	if nr, ok := syscallNumbers[name]; ok {
		return nr, nil
	}
	return 0, fmt.Errorf("unknown syscall %q", name)
}

// SyscallNameList is every known syscall name, sorted.
func SyscallNameList() []string {
	out := make([]string, 0, len(syscallNumbers))
	for n := range syscallNumbers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DefaultTraced are the syscalls that get an individual event in every call by default (on top
// of opens, connects and the process lifecycle, which are always traced): the ones that change
// the file tree, cross isolation boundaries or reach the kernel's attack surface. Everything
// else is counted per call in the kernel, not reported one by one.
var DefaultTraced = []string{
	// destructive and irreversible file operations
	"unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2", "truncate",
	"chmod", "fchmodat", "fchmodat2", "chown", "fchownat", "lchown", "link", "linkat", "symlink", "symlinkat",
	"mkdir", "mkdirat", "mknod", "mknodat",
	// isolation and escape
	"mount", "umount2", "fsopen", "fsmount", "move_mount", "open_tree", "pivot_root", "chroot", "unshare", "setns", "ptrace",
	"process_vm_readv", "process_vm_writev", "kill", "tkill", "tgkill",
	"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "capset",
	// kernel attack surface
	"bpf", "perf_event_open", "init_module", "finit_module", "delete_module",
	"kexec_load", "kexec_file_load", "keyctl", "add_key", "request_key",
	"userfaultfd", "io_uring_setup", "open_by_handle_at", "name_to_handle_at",
	"memfd_create", "execveat", "socket", "personality", "iopl", "ioperm",
}
