package sandboxinit

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// serveConnects performs the connects the launcher's approval supervisor sends on fd (each
// with the tool's socket and the address it copied) and answers each with its errno, until
// the launcher closes the channel. A connect runs here because the init is in the call's
// cgroup: the egress programs (bpf-cgroup-sock) judge it as the call's, exactly as the tool's own.
// Only inet sockets come here (the supervisor connects others itself, as the tool).
func serveConnects(fd int) {
	r := NewReader(fd)
	var mu sync.Mutex
	for {
		m, files, err := r.Next()
		if err != nil {
			return
		}
		if m.Connect == nil || len(files) != 1 {
			for _, f := range files {
				f.Close()
			}
			continue
		}
		go func(req ConnectRequest, sock int) {
			var errno unix.Errno
			if len(req.Addr) == 0 {
				errno = unix.EINVAL
			} else {
				_, _, errno = unix.Syscall(unix.SYS_CONNECT, uintptr(sock), uintptr(unsafe.Pointer(&req.Addr[0])), uintptr(len(req.Addr)))
			}
			unix.Close(sock)
			mu.Lock()
			_ = SendFrame(fd, Message{Connected: &ConnectResult{ID: req.ID, Errno: int(errno)}})
			mu.Unlock()
		}(*m.Connect, dupAndClose(files))
	}
}

func dupAndClose(files []*os.File) int {
	fd, err := unix.Dup(int(files[0].Fd()))
	files[0].Close()
	if err != nil {
		return -1
	}
	return fd
}
