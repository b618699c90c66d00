package approval

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
)

// How the race on a held syscall's pointer arguments is closed, kind by kind:
//
//   - unlink, unlinkat, rmdir, rename, renameat, renameat2, open/openat/creat for writing,
//     truncate: the path is read once from /proc/TID/mem into the supervisor's memory, the
//     notification is checked still pending (ID_VALID: the thread, hence the memory, is the
//     one that asked), and from then on only that copy is used. The supervisor resolves it
//     itself, from the tool's own root (chroot to /proc/TID/root on a thread of its own) and
//     its cwd or dirfd (/proc/TID/cwd, pidfd_getfd), to an open directory and a name; a person
//     is asked about that directory's path and the name; the approved action is done on that
//     open directory and name (unlinkat, renameat2, openat2 of the one name with
//     RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH), as the tool's ids (setfsuid/setfsgid, no groups,
//     no capabilities) under the tool's Landlock domain, and the syscall is answered with its
//     result (an opened file through ADDFD). SECCOMP_USER_NOTIF_FLAG_CONTINUE is not used:
//     a thread rewriting the path while the request waits changes memory nobody reads again.
//   - connect: the address is copied the same way; the supervisor connects the tool's own
//     socket (pidfd_getfd) to the copied address and answers with the result. The socket keeps
//     its cgroup, so the bpf-cgroup-sock egress programs judge this connect as the tool's, and the
//     acting thread's Landlock domain applies the tool's TCP rules. (One-shot allow in the
//     cgroup layer was the alternative; it would need a new map and still re-read the address
//     from the tool's memory at the hook, where it can have changed.)
//   - execve, execveat: nobody can exec for the tool, so these alone continue, and the
//     kernel's exec hook holds what runs to what was decided (exec.go).
//
// Syscalls no rule gates (a write outside every glob) are performed the same way, at once:
// answering them with CONTINUE would let a thread swap a gated path in after the check.

// actionLink is a link held for write rules (a second name for a write-gated file); it is
// asked about as a write.
const actionLink = "link"

// fdInstalled is what perform returns when ADDFD already answered the syscall.
const fdInstalled = math.MinInt64

// prepare reads the held syscall, resolves what it acts on and finds the rule that gates it,
// in phases: take the thread (its memory, root, umask and process), then, for a path
// syscall (its entry in heldSyscalls, syscalls.go), read its arguments, confine this thread as the tool (jail), resolve
// the paths, decide (the object a person is asked about, the rule) and bind the action. A
// non-zero errno answers the syscall with it.
func (s *Supervisor) prepare(o *op) unix.Errno {
	t, e := s.takeThread(o)
	if e != 0 {
		return e
	}
	sc := heldSyscalls[o.name]
	if sc == nil {
		return unix.ENOSYS
	}
	if sc.own != nil {
		return sc.own(s, o, t)
	}
	o.action = sc.action
	c, e := sc.args(&o.n.Data.Args)
	if e != 0 {
		return e
	}
	paths, starts, e := s.readPaths(o, t, sc.paths)
	if e != 0 {
		return e
	}
	mt, err := s.mountTableOf(t.proc)
	if err != nil {
		s.cfg.Log.Error("approval: the tool's mount table", "call", s.cfg.Call.CallID, "err", err)
		return unix.EPERM
	}
	o.jailed = true
	if err := s.jail(t.root, t.umask); err != nil {
		s.cfg.Log.Error("approval: confine the acting thread", "call", s.cfg.Call.CallID, "err", err)
		return unix.EPERM
	}
	for i, p := range paths {
		l, e, on := resolve(mt, starts[i], p, sc.follow != nil && sc.follow(i, c.flags))
		if on != nil {
			return s.refuseSlow(o, &slowFS{path: p, on: on})
		}
		if e != 0 {
			return e
		}
		o.cleanup = append(o.cleanup, l.close)
		c.locs = append(c.locs, l)
		o.paths = append(o.paths, l.path)
	}
	s.rootsOnce(t.root, mt)
	o.object, o.rule = sc.decide(s, c)
	o.inode, o.inodeKnown = c.locs[0].inode(), true
	if sc.action == actionLink {
		o.action = policy.ApproveWrite // a link is asked about as a write
	}
	if sc.check != nil {
		if e := sc.check(s, o, c); e != 0 {
			return e
		}
	}
	o.perform = func() (int64, unix.Errno) { return sc.perform(s, o, c) }
	return 0
}

// thread is what the supervisor took of a held syscall's thread: its memory, root, umask,
// process (tgid, pidfd) and /proc directory. Closed with the op.
type thread struct {
	proc        string
	mem         *os.File
	root, pidfd int
	umask       int
}

func (s *Supervisor) takeThread(o *op) (*thread, unix.Errno) {
	t := &thread{proc: "/proc/" + strconv.Itoa(int(o.n.PID))}
	mem, err := os.Open(t.proc + "/mem")
	if err != nil {
		return nil, unix.EPERM
	}
	o.cleanup = append(o.cleanup, func() { mem.Close() })
	t.mem = mem
	root, err := unix.Open(t.proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, unix.EPERM
	}
	o.cleanup = append(o.cleanup, func() { unix.Close(root) })
	t.root = root
	tgid, umask, err := procStatus(t.proc)
	if err != nil {
		return nil, unix.EPERM
	}
	o.tgid, t.umask = tgid, umask
	pidfd, err := unix.PidfdOpen(tgid, 0)
	if err != nil {
		return nil, unix.EPERM
	}
	o.cleanup = append(o.cleanup, func() { unix.Close(pidfd) })
	t.pidfd = pidfd
	return t, 0
}

// readPaths reads every path argument, and the directory each relative one starts from (the
// thread's cwd, or its dirfd), before anything else, then checks the thread still waits:
// only then is what was read this syscall's.
func (s *Supervisor) readPaths(o *op, t *thread, args []pathArg) ([]string, []int, unix.Errno) {
	paths := make([]string, len(args))
	starts := make([]int, len(args))
	for i, a := range args {
		p, e := readString(t.mem, o.n.Data.Args[a.addr])
		if e != 0 {
			return nil, nil, e
		}
		paths[i] = p
		if strings.HasPrefix(p, "/") {
			continue
		}
		var d int
		var err error
		if a.dirfd == cwdArg || int32(o.n.Data.Args[a.dirfd]) == unix.AT_FDCWD {
			d, err = unix.Open(t.proc+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		} else {
			d, err = unix.PidfdGetfd(t.pidfd, int(int32(o.n.Data.Args[a.dirfd])), 0)
		}
		if err != nil {
			return nil, nil, unix.EBADF
		}
		o.cleanup = append(o.cleanup, func() { unix.Close(d) })
		starts[i] = d
	}
	if !idValid(s.fd, o.n.ID) {
		return nil, nil, unix.ESRCH
	}
	return paths, starts, 0
}

func (s *Supervisor) prepareConnect(o *op, mem *os.File, pidfd, root, umask int) unix.Errno {
	args := o.n.Data.Args
	o.action = policy.ApproveConnect
	size := args[2]
	if size > 128 || size < 2 {
		return unix.EINVAL
	}
	buf := make([]byte, size)
	if _, err := mem.ReadAt(buf, int64(args[1])); err != nil {
		return unix.EFAULT
	}
	sock, err := unix.PidfdGetfd(pidfd, int(int32(args[0])), 0)
	if err != nil {
		return unix.EBADF
	}
	o.cleanup = append(o.cleanup, func() { unix.Close(sock) })
	if !idValid(s.fd, o.n.ID) {
		return unix.ESRCH
	}
	o.jailed = true
	if err := s.jail(root, umask); err != nil {
		s.cfg.Log.Error("approval: confine the acting thread", "call", s.cfg.Call.CallID, "err", err)
		return unix.EPERM
	}
	addr, port, ok := inetAddr(buf)
	if ok {
		o.object = netip.AddrPortFrom(addr, port).String()
		o.rule = s.match(func(r *policy.ApprovalRule) bool {
			return r.Action == policy.ApproveConnect && r.CIDR.Contains(addr) && (r.Port == 0 || r.Port == port)
		})
	}
	o.perform = func() (int64, unix.Errno) {
		if ok {
			// An inet connect goes through the init, in the call's cgroup: the egress programs
			// judge by the current task's cgroup, and this thread is in none of the call's.
			if s.cfg.ConnectInet == nil {
				return 0, unix.EPERM
			}
			return 0, s.cfg.ConnectInet(sock, buf)
		}
		// Other families (unix sockets): no cgroup hook judges them; this thread does it as
		// the tool, from the tool's root (a socket path resolves there).
		_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(sock), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		return 0, e
	}
	return 0
}

func inetAddr(b []byte) (netip.Addr, uint16, bool) {
	fam := binary.LittleEndian.Uint16(b)
	switch {
	case fam == unix.AF_INET && len(b) >= 8:
		return netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]), true
	case fam == unix.AF_INET6 && len(b) >= 24:
		return netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:4]), true
	}
	return netip.Addr{}, 0, false
}

func (s *Supervisor) match(f func(r *policy.ApprovalRule) bool) *policy.ApprovalRule {
	for i := range s.cfg.Rules.Rules {
		if r := &s.cfg.Rules.Rules[i]; f(r) {
			return r
		}
	}
	return nil
}

// jail makes this thread act as the tool: its root (a chroot on a file system context of the
// thread's own), its umask, its ids with no supplementary group and no capability, and its
// Landlock domain. The thread is never given back to the runtime (handle never unlocks it).
func (s *Supervisor) jail(root, umask int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter the call's root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot to the call's root: %w", err)
	}
	unix.Umask(umask)
	// Per thread: the raw syscalls (syscall.Setgroups would change every thread of bermd).
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("drop groups: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(s.cfg.Call.HostGID), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(s.cfg.Call.HostUID), 0, 0)
	if g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); uint32(g) != s.cfg.Call.HostGID {
		return fmt.Errorf("setfsgid %d did not take", s.cfg.Call.HostGID)
	}
	if u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(u) != s.cfg.Call.HostUID {
		return fmt.Errorf("setfsuid %d did not take", s.cfg.Call.HostUID)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if rs := s.cfg.Call.Landlock; rs != nil {
		if err := landlock.Restrict(*rs); err != nil {
			return err
		}
	}
	return nil
}

// loc is a resolved path: an open directory and a name in it, and the path a person reads.
type loc struct {
	dir  int
	name string
	path string
	anc  *ancestry // its identity and its ancestors', once asked for (trees.go)
	// mt is the call's mount table when it holds a slow file system (slowfs.go): the
	// directory and the name are on none, and nothing above them is looked at on one.
	mt *mountTable
}

func (l loc) close() { unix.Close(l.dir) }

// inode is what l names as "MAJOR:MINOR INODE" (not following a last link), "" for nothing.
func (l loc) inode() string {
	var st unix.Stat_t
	if unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// resolve opens p's directory from start (p relative) or the thread's root (p absolute), as
// the tool would walk it: symbolic links in the directory part are followed, confined to the
// tool's root by the thread's chroot. With follow, a symbolic link as the last name is
// followed too (what open does), up to the kernel's 40 links. With mt (the tool's mount
// table holds a slow file system), the walk is the supervisor's own, and a path leading into
// a slow file system is answered with its mount, nothing asked of it (slowfs.go).
func resolve(mt *mountTable, start int, p string, follow bool) (loc, unix.Errno, *mount) {
	for links := 0; ; links++ {
		l, e, on := resolveOnce(mt, start, p)
		if e != 0 || on != nil || !follow {
			return l, e, on
		}
		var st unix.Stat_t
		if unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return l, 0, nil
		}
		if links >= 40 {
			l.close()
			return loc{}, unix.ELOOP, nil
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(l.dir, l.name, buf)
		if err != nil {
			l.close()
			return loc{}, errnoOf(err), nil
		}
		// The target is relative to the link's directory: that directory stays open until
		// the next round has resolved from it.
		prev := l
		start, p = l.dir, string(buf[:n])
		defer prev.close()
	}
}

func resolveOnce(mt *mountTable, start int, p string) (loc, unix.Errno, *mount) {
	if p == "" {
		return loc{}, unix.ENOENT, nil
	}
	trimmed := strings.TrimRight(p, "/")
	if trimmed == "" {
		return loc{}, unix.EBUSY, nil // the root itself
	}
	dirPart, name := ".", trimmed
	if i := strings.LastIndexByte(trimmed, '/'); i >= 0 {
		dirPart, name = trimmed[:i], trimmed[i+1:]
		if dirPart == "" {
			dirPart = "/"
		}
	}
	if name == "." || name == ".." {
		dirPart, name = trimmed, "."
	}
	if strings.HasPrefix(dirPart, "/") {
		start = unix.AT_FDCWD // absolute: the thread's root (its cwd is not used)
	}
	var fd int
	if mt != nil {
		var e unix.Errno
		var on *mount
		if fd, e, on = mt.walkDir(start, dirPart); e != 0 || on != nil {
			return loc{}, e, on
		}
		if name != "." {
			// The name itself may be a slow file system's mount point (its root).
			if on, err := mt.slowAt(fd, name); on != nil || err != nil && err != unix.ENOENT {
				unix.Close(fd)
				return loc{}, errnoOf(err), on
			}
		}
	} else {
		var err error
		fd, err = unix.Openat2(start, dirPart, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return loc{}, errnoOf(err), nil
		}
	}
	if err := unix.Fchdir(fd); err != nil {
		unix.Close(fd)
		return loc{}, errnoOf(err), nil
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Getcwd(buf)
	if err != nil || n < 2 || buf[0] != '/' {
		unix.Close(fd)
		return loc{}, unix.ENOENT, nil // not under the call's root
	}
	dirPath := string(buf[:n-1])
	full := path.Join(dirPath, name)
	return loc{dir: fd, name: name, path: full, mt: mt}, 0, nil
}

// openBeneath opens the one name in l's directory with the tool's flags, refusing a symbolic
// link there: the name was resolved (links followed) when the person was asked, and a link
// put in its place since would lead elsewhere.
func openBeneath(l loc, flags int, mode uint32) (int, error) {
	if flags&unix.O_CREAT == 0 && flags&unix.O_TMPFILE != unix.O_TMPFILE {
		mode = 0 // openat2 refuses a mode nothing is created with (open ignores it)
	}
	return unix.Openat2(l.dir, l.name, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode & 0o7777),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}

var errnoOf = policy.ErrnoOf

// readString reads a NUL-terminated string of at most PATH_MAX bytes at addr.
func readString(mem *os.File, addr uint64) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	buf := make([]byte, 256)
	for len(out) < unix.PathMax {
		n, err := mem.ReadAt(buf, int64(addr)+int64(len(out)))
		if n == 0 && err != nil {
			return "", unix.EFAULT
		}
		if i := strings.IndexByte(string(buf[:n]), 0); i >= 0 {
			return string(append(out, buf[:i]...)), 0
		}
		out = append(out, buf[:n]...)
	}
	return "", unix.ENAMETOOLONG
}

// procStatus reads a thread's process id and umask.
func procStatus(proc string) (tgid, umask int, err error) {
	f, err := os.Open(proc + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	umask = 0o022
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Tgid":
			tgid, _ = strconv.Atoi(v)
		case "Umask":
			if m, err := strconv.ParseUint(v, 8, 32); err == nil {
				umask = int(m)
			}
		}
	}
	if tgid == 0 {
		return 0, 0, fmt.Errorf("%s/status: no Tgid", proc)
	}
	return tgid, umask, nil
}
