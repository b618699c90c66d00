package sandboxer

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openTerminal opens the tool's end of the call's pty from its master (TIOCGPTPEER: no path
// looked up, whatever the launcher's /dev shows), and a copy of the master to read the tool's
// output from, counted against its output cap like a pipe's.
func openTerminal(master *os.File) (pty, out *os.File, err error) {
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return nil, nil, fmt.Errorf("open the call's pty (stdin is not a pty master?): %w", errno)
	}
	pty = os.NewFile(fd, "pty")
	dup, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		pty.Close()
		return nil, nil, fmt.Errorf("read the call's pty: %w", err)
	}
	return pty, os.NewFile(uintptr(dup), "pty-master"), nil
}
