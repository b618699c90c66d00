package sandboxer

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// terminal is the launcher's side of a call's pty.
type terminal struct {
	pty  *os.File // the tool's end, handed to the init
	out  *os.File // a copy of the master, to read the tool's output from
	name string   // the pty's name on the host (/dev/pts/N)
	// tree is a detached mount of the pty's device file, for the init to show it at name in
	// the call's /dev (which has no devpts), so that tty(1) names it; -1 when it could not be
	// made (a launcher in another mount namespace than the master's opener).
	tree int
}

// openTerminal opens the tool's end of the call's pty from its master (TIOCGPTPEER: no path
// looked up, whatever the launcher's /dev shows), and a copy of the master to read the tool's
// output from, counted against its output cap like a pipe's.
func openTerminal(master *os.File) (_ *terminal, err error) {
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return nil, fmt.Errorf("open the call's pty (stdin is not a pty master?): %w", errno)
	}
	t := &terminal{pty: os.NewFile(fd, "pty"), tree: -1}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		return nil, fmt.Errorf("number of the call's pty: %w", err)
	}
	t.name = "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	dup, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read the call's pty: %w", err)
	}
	t.out = os.NewFile(uintptr(dup), "pty-master")
	if tree, err := unix.OpenTree(int(t.pty.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH); err == nil {
		t.tree = tree
	}
	return t, nil
}

// close closes the launcher's copies of what went to the init: the master's reads end (EIO)
// when the tool's processes are gone, not when the launcher lets go.
func (t *terminal) close() {
	if t == nil {
		return
	}
	if t.pty != nil {
		t.pty.Close()
		t.pty = nil
	}
	if t.tree >= 0 {
		unix.Close(t.tree)
		t.tree = -1
	}
}

// config tells the init about the pty (nothing without one) and returns the files to send
// with the config beyond the tool's stdin and the workspace.
func (t *terminal) config(cfg *sandboxinit.Config, use *callproto.Terminal) []int {
	if t == nil {
		return nil
	}
	cfg.Terminal = &sandboxinit.Terminal{Stdout: use.Stdout, Stderr: use.Stderr}
	if t.tree < 0 {
		return nil
	}
	cfg.Terminal.Name = t.name
	return []int{t.tree}
}
