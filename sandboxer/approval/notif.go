package approval

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp user-notification ABI (linux/seccomp.h); x/sys/unix has the ioctl numbers only.

type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type notif struct {
	ID    uint64
	PID   uint32 // the thread that made the syscall, in the listener's pid namespace (the host's)
	Flags uint32
	Data  seccompData
}

type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

type notifAddfd struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

func ioctl(fd int, req uint, arg unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return 0, e
	}
	return r, nil
}

func recvNotif(fd int) (*notif, error) {
	n := new(notif)
	for {
		_, err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(n))
		if err != unix.EINTR {
			return n, err
		}
	}
}

// answer sets the held syscall's result: val, or the error errno. Not the CONTINUE flag: the
// supervisor answers for every syscall it holds, so the kernel never re-reads the tool's
// memory after it was checked; execs alone continue (exec.go), held to the decision by the
// kernel's exec hook.
func answer(fd int, id uint64, val int64, errno unix.Errno) error {
	r := notifResp{ID: id, Val: val}
	if errno != 0 {
		r.Val, r.Error = 0, -int32(errno)
	}
	_, err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
	return err
}

// idValid says whether the notification is still pending: its thread still waits in the
// syscall. Checked after reading the tool's memory (the pid could have been reused by then)
// and before acting on an approval (the call may have been killed while it waited).
func idValid(fd int, id uint64) bool {
	_, err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id))
	return err == nil
}

// addFD installs src in the tool's file table and answers the syscall with its number, in
// one step (SECCOMP_ADDFD_FLAG_SEND): what an open the supervisor performed returns.
func addFD(fd int, id uint64, src int, cloexec bool) (int, error) {
	a := notifAddfd{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(src)}
	if cloexec {
		a.NewfdFlags = unix.O_CLOEXEC
	}
	r, err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_ADDFD, unsafe.Pointer(&a))
	return int(r), err
}
