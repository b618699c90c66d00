package seccomp_test

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The approval filter on the real kernel. Installed without a listener, a notified syscall
// fails with ENOSYS before the kernel runs it; a syscall the filter answers itself gets the
// kernel's own answer (the empty path's ENOENT, a bad descriptor's EBADF). So the probes show
// exactly which syscalls would stop for the supervisor: the gated ones, and nothing else (a
// read-only open, getppid and a connect without a connect rule never leave the filter).
func TestApprovalFilterRealKernel(t *testing.T) {
	requireSeccompFilter(t)
	c := compile(t, `  approvals:
    rules:
      - {name: r, match: {unlink: "${WORKSPACE}/reports/**"}}
      - {name: w, match: {write: "${WORKSPACE}/out/**"}}
`)
	if c.Approvals == nil {
		t.Fatal("no approval filter")
	}
	atCWD := uint64(uint32(0xffffff9c))
	for _, tc := range []struct {
		name string
		p    probe
		want string
	}{
		{"getppid", probe{Nr: unix.SYS_GETPPID}, "ok"},
		{"openat read-only", probe{Nr: unix.SYS_OPENAT, Args: [6]uint64{atCWD, 0, unix.O_RDONLY}, Ptrs: []int{1}}, "ENOENT"},
		{"openat O_WRONLY", probe{Nr: unix.SYS_OPENAT, Args: [6]uint64{atCWD, 0, unix.O_WRONLY}, Ptrs: []int{1}}, "ENOSYS"},
		{"openat O_RDWR|high bits", probe{Nr: unix.SYS_OPENAT, Args: [6]uint64{atCWD, 0, 1<<32 | unix.O_RDWR}, Ptrs: []int{1}}, "ENOSYS"},
		{"openat O_CREAT", probe{Nr: unix.SYS_OPENAT, Args: [6]uint64{atCWD, 0, unix.O_CREAT}, Ptrs: []int{1}}, "ENOSYS"},
		{"openat O_TRUNC", probe{Nr: unix.SYS_OPENAT, Args: [6]uint64{atCWD, 0, unix.O_TRUNC}, Ptrs: []int{1}}, "ENOSYS"},
		{"open read-only", probe{Nr: unix.SYS_OPEN, Args: [6]uint64{0, unix.O_RDONLY}, Ptrs: []int{0}}, "ENOENT"},
		{"open O_WRONLY", probe{Nr: unix.SYS_OPEN, Args: [6]uint64{0, unix.O_WRONLY}, Ptrs: []int{0}}, "ENOSYS"},
		{"creat", probe{Nr: unix.SYS_CREAT, Ptrs: []int{0}}, "ENOSYS"},
		{"truncate", probe{Nr: unix.SYS_TRUNCATE, Ptrs: []int{0}}, "ENOSYS"},
		{"unlinkat", probe{Nr: unix.SYS_UNLINKAT, Args: [6]uint64{atCWD}, Ptrs: []int{1}}, "ENOSYS"},
		{"unlink", probe{Nr: unix.SYS_UNLINK, Ptrs: []int{0}}, "ENOSYS"},
		{"rmdir", probe{Nr: unix.SYS_RMDIR, Ptrs: []int{0}}, "ENOSYS"},
		{"renameat2", probe{Nr: unix.SYS_RENAMEAT2, Args: [6]uint64{atCWD, 0, atCWD}, Ptrs: []int{1, 3}}, "ENOSYS"},
		{"openat2 (flags behind a pointer)", probe{Nr: unix.SYS_OPENAT2, Args: [6]uint64{atCWD, 0, 0, 24}, Ptrs: []int{1, 2}}, "ENOSYS"},
		{"io_uring_setup", probe{Nr: unix.SYS_IO_URING_SETUP, Args: [6]uint64{1}, Ptrs: []int{1}}, "EPERM"},
		{"connect without a connect rule", probe{Nr: unix.SYS_CONNECT, Args: [6]uint64{^uint64(0), 0, 16}, Ptrs: []int{1}}, "EBADF"},
		{"mkdirat", probe{Nr: unix.SYS_MKDIRAT, Args: [6]uint64{atCWD}, Ptrs: []int{1}}, "ENOENT"},
	} {
		got, sig := runProbes(t, c.Approvals.Filter, false, []probe{tc.p})
		if sig != 0 || strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v (signal %v), want %s", tc.name, got, sig, tc.want)
		}
	}
}
