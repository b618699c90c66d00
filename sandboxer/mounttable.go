package sandboxer

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// mountTable is this process's /proc/self/mountinfo, read again only when the kernel says the
// mount table changed. Every launch compiles its policy against the table and plans its root
// from it; reading it (the kernel prints every mount of the namespace) was a good part of a
// warm launch's compile time, twice per call. The kernel's own change notification makes the
// copy exact: poll on an open mountinfo reports POLLPRI|POLLERR once any mount of the
// namespace was added, removed or changed since the file's last such report, so a copy read
// after a report that came with no change since is the table as it is now.
type mountTable struct {
	path string // /proc/self/mountinfo; a test reads its own thread's
	mu   sync.Mutex
	// fd is a raw descriptor, not an *os.File: the runtime's poller would register an
	// *os.File with epoll, whose readiness checks take the kernel's change reports first.
	fd   int
	open bool
	text string
	read bool
	// reads counts the times the table was read (tests).
	reads int
}

var hostMounts = &mountTable{path: "/proc/self/mountinfo"}

// current is the mount table's text.
func (m *mountTable) current() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.open {
		fd, err := unix.Open(m.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("mount table: %w", err)
		}
		m.fd, m.open = fd, true
	}
	if m.read && !m.changed() {
		return m.text, nil
	}
	// The report is taken (changed) before the read: a change after it is reported again.
	text, err := m.readAll()
	if err != nil {
		return "", err
	}
	m.text, m.read = text, true
	m.reads++
	return text, nil
}

// changed polls the open table without waiting: true when the kernel reported a change (or
// the poll could not say, which is read as a change).
func (m *mountTable) changed() bool {
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n != 0
	}
}

func (m *mountTable) readAll() (string, error) {
	buf := make([]byte, max(2*len(m.text), 16<<10))
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		k, err := unix.Pread(m.fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("mount table: %w", err)
		}
		if k == 0 {
			return string(buf[:n]), nil
		}
		n += k
	}
}

// close lets go of the table (tests; the process's own table is kept open).
func (m *mountTable) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open {
		unix.Close(m.fd)
		m.open, m.read = false, false
	}
}
