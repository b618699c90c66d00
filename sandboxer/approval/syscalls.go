package approval

import (
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// The held syscalls, one entry each. A path syscall's entry says where its paths are, what
// its flags are and which of them it refuses (args), whether a path's last symbolic link is
// followed, what a person is asked about and which rule gates it (decide), what is refused
// before anyone is asked (check), and how the supervisor performs it (perform). connect and
// the execs read and decide in phases of their own (own: prepareConnect, prepareExec).

// pathArg is where a path argument is: the argument holding the directory it is relative
// to (cwdArg: the thread's cwd) and the one holding its address.
type pathArg struct{ dirfd, addr int }

// cwdArg is a path relative to the thread's cwd (the syscall has no dirfd argument).
const cwdArg = -1

// pathCall is one held path syscall's validated arguments and resolved paths.
type pathCall struct {
	flags, mode, length uint64
	locs                []loc
}

type heldSyscall struct {
	// own reads, decides and binds the action itself (connect, execve, execveat): the
	// fields below are unused.
	own    func(s *Supervisor, o *op, t *thread) unix.Errno
	action string // policy.Approve*, or actionLink
	paths  []pathArg
	// args reads the syscall's flags, mode and length from its registers, refusing flags the
	// supervisor does not perform.
	args func(a *[6]uint64) (*pathCall, unix.Errno)
	// follow says whether the i-th path's last symbolic link is followed (nil: never).
	follow  func(i int, flags uint64) bool
	decide  func(s *Supervisor, c *pathCall) (object string, rule *policy.ApprovalRule)
	check   func(s *Supervisor, o *op, c *pathCall) unix.Errno // nil: nothing refused before
	perform func(s *Supervisor, o *op, c *pathCall) (int64, unix.Errno)
}

var heldSyscalls = map[string]*heldSyscall{
	"connect": {own: func(s *Supervisor, o *op, t *thread) unix.Errno {
		return s.prepareConnect(o, t.mem, t.pidfd, t.root, t.umask)
	}},
	"execve":    {own: prepareExecOf},
	"execveat":  {own: prepareExecOf},
	"unlink":    unlinkCall([]pathArg{{cwdArg, 0}}, noArgs),
	"rmdir":     unlinkCall([]pathArg{{cwdArg, 0}}, fixedFlags(unix.AT_REMOVEDIR)),
	"unlinkat":  unlinkCall([]pathArg{{0, 1}}, flagsArg(2, unix.AT_REMOVEDIR, unix.EINVAL)),
	"rename":    renameCall([]pathArg{{cwdArg, 0}, {cwdArg, 1}}, noArgs),
	"renameat":  renameCall([]pathArg{{0, 1}, {2, 3}}, noArgs),
	"renameat2": renameCall([]pathArg{{0, 1}, {2, 3}}, flagsArg(4, ^uint64(0), 0)),
	"link":      linkCall([]pathArg{{cwdArg, 0}, {cwdArg, 1}}, noArgs),
	// AT_EMPTY_PATH links a descriptor's file by no path: nothing to show a person.
	"linkat": linkCall([]pathArg{{0, 1}, {2, 3}}, flagsArg(4, unix.AT_SYMLINK_FOLLOW, unix.EPERM)),
	"open":   openCall([]pathArg{{cwdArg, 0}}, openArgs(1, 2)),
	"openat": openCall([]pathArg{{0, 1}}, openArgs(2, 3)),
	"creat": openCall([]pathArg{{cwdArg, 0}}, func(a *[6]uint64) (*pathCall, unix.Errno) {
		return &pathCall{flags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC, mode: a[1]}, 0
	}),
	"truncate": {action: policy.ApproveWrite, paths: []pathArg{{cwdArg, 0}},
		args:   func(a *[6]uint64) (*pathCall, unix.Errno) { return &pathCall{length: a[1]}, 0 },
		follow: func(int, uint64) bool { return true },
		decide: decideWrite, check: checkTruncate, perform: performTruncate},
}

func noArgs(*[6]uint64) (*pathCall, unix.Errno) { return &pathCall{}, 0 }

func fixedFlags(f uint64) func(*[6]uint64) (*pathCall, unix.Errno) {
	return func(*[6]uint64) (*pathCall, unix.Errno) { return &pathCall{flags: f}, 0 }
}

// flagsArg reads the flags in argument i; flags outside allowed are refused with refuse.
func flagsArg(i int, allowed uint64, refuse unix.Errno) func(*[6]uint64) (*pathCall, unix.Errno) {
	return func(a *[6]uint64) (*pathCall, unix.Errno) {
		if a[i]&^allowed != 0 {
			return nil, refuse
		}
		return &pathCall{flags: a[i]}, 0
	}
}

func openArgs(flags, mode int) func(*[6]uint64) (*pathCall, unix.Errno) {
	return func(a *[6]uint64) (*pathCall, unix.Errno) { return &pathCall{flags: a[flags], mode: a[mode]}, 0 }
}

func unlinkCall(paths []pathArg, args func(*[6]uint64) (*pathCall, unix.Errno)) *heldSyscall {
	return &heldSyscall{action: policy.ApproveUnlink, paths: paths, args: args,
		// A directory's removal is gated by the rules protecting what could be beneath it
		// too: an emptied ancestor of a protected tree is not removed (and remade) unasked.
		decide: func(s *Supervisor, c *pathCall) (string, *policy.ApprovalRule) {
			return c.locs[0].path, s.match(func(r *policy.ApprovalRule) bool {
				return r.Action == policy.ApproveUnlink && s.under(r, &c.locs[0], c.flags&unix.AT_REMOVEDIR != 0)
			})
		},
		perform: func(_ *Supervisor, _ *op, c *pathCall) (int64, unix.Errno) {
			l := c.locs[0]
			return 0, errnoOf(unix.Unlinkat(l.dir, l.name, int(c.flags)))
		}}
}

// renameCall: a rename is gated by rename, unlink and write rules on either name (it moves a
// gated file out of its tree, or replaces one), and on what could be beneath either name
// when it is a directory: moving an ancestor of a protected tree (mv project p2, then rm -rf
// p2/.git), exchanging it (RENAME_EXCHANGE) or replacing it moves the tree out from under
// its rules' paths.
func renameCall(paths []pathArg, args func(*[6]uint64) (*pathCall, unix.Errno)) *heldSyscall {
	return &heldSyscall{action: policy.ApproveRename, paths: paths, args: args,
		decide: func(s *Supervisor, c *pathCall) (string, *policy.ApprovalRule) {
			a, b := &c.locs[0], &c.locs[1]
			aDir, bDir := a.isDir(), b.isDir()
			return a.path + " -> " + b.path, s.match(func(r *policy.ApprovalRule) bool {
				return (r.Action == policy.ApproveRename || r.Action == policy.ApproveUnlink || r.Action == policy.ApproveWrite) &&
					(s.under(r, a, aDir) || s.under(r, b, bDir))
			})
		},
		perform: func(_ *Supervisor, _ *op, c *pathCall) (int64, unix.Errno) {
			a, b := c.locs[0], c.locs[1]
			return 0, errnoOf(unix.Renameat2(a.dir, a.name, b.dir, b.name, uint(c.flags)))
		}}
}

// linkCall: a link is held for write rules (a second name for a write-gated file) and asked
// about as a write.
func linkCall(paths []pathArg, args func(*[6]uint64) (*pathCall, unix.Errno)) *heldSyscall {
	return &heldSyscall{action: actionLink, paths: paths, args: args,
		follow: func(i int, flags uint64) bool { return i == 0 && flags&unix.AT_SYMLINK_FOLLOW != 0 },
		decide: func(s *Supervisor, c *pathCall) (string, *policy.ApprovalRule) {
			return c.locs[0].path + " => " + c.locs[1].path, s.match(func(r *policy.ApprovalRule) bool {
				return r.Action == policy.ApproveWrite && (s.under(r, &c.locs[0], false) || s.under(r, &c.locs[1], false))
			})
		},
		perform: func(_ *Supervisor, _ *op, c *pathCall) (int64, unix.Errno) {
			a, b := c.locs[0], c.locs[1]
			return 0, errnoOf(unix.Linkat(a.dir, a.name, b.dir, b.name, 0))
		}}
}

// openCall: a write-open (the filter holds opens with write flags), performed without ever
// blocking (openNoBlock) and answered with the file through ADDFD.
func openCall(paths []pathArg, args func(*[6]uint64) (*pathCall, unix.Errno)) *heldSyscall {
	return &heldSyscall{action: policy.ApproveWrite, paths: paths, args: args,
		follow: func(_ int, flags uint64) bool {
			return flags&unix.O_NOFOLLOW == 0 && flags&(unix.O_CREAT|unix.O_EXCL) != unix.O_CREAT|unix.O_EXCL
		},
		decide: decideWrite, check: checkOpen, perform: performOpen}
}

func decideWrite(s *Supervisor, c *pathCall) (string, *policy.ApprovalRule) {
	return c.locs[0].path, s.match(func(r *policy.ApprovalRule) bool {
		return r.Action == policy.ApproveWrite && s.under(r, &c.locs[0], false)
	})
}

// checkOpen refuses, before anyone is asked, an open of what the supervisor does not open
// (openable): a FIFO, a socket, a device other than the granted ones.
func checkOpen(s *Supervisor, o *op, c *pathCall) unix.Errno {
	l := c.locs[0]
	var st unix.Stat_t
	if err := unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0 // nothing there (yet): the open creates it, or fails as the tool's would
	}
	return s.refuseUnopenable(o, &st)
}

func checkTruncate(_ *Supervisor, _ *op, c *pathCall) unix.Errno {
	l := c.locs[0]
	var st unix.Stat_t
	if err := unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0 // the open fails as truncate would
	}
	return truncatable(&st)
}

// truncatable is truncate's answer for what is not a regular file (it opens nothing else).
func truncatable(st *unix.Stat_t) unix.Errno {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return unix.EISDIR
	}
	return unix.EINVAL
}

func performOpen(s *Supervisor, o *op, c *pathCall) (int64, unix.Errno) {
	fd, e := s.openNoBlock(o, c.locs[0], int(c.flags), uint32(c.mode))
	if e != 0 {
		return 0, e
	}
	defer unix.Close(fd)
	if _, err := addFD(s.fd, o.n.ID, fd, c.flags&unix.O_CLOEXEC != 0); err != nil {
		return 0, errnoOf(err)
	}
	return fdInstalled, 0
}

func performTruncate(s *Supervisor, o *op, c *pathCall) (int64, unix.Errno) {
	l := c.locs[0]
	pfd, err := openBeneath(l, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, errnoOf(err)
	}
	var st unix.Stat_t
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil {
		return 0, errnoOf(err)
	}
	if e := truncatable(&st); e != 0 {
		return 0, e
	}
	fd, e := s.openNoBlock(o, l, unix.O_WRONLY, 0)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, unix.EINVAL
	}
	return 0, errnoOf(unix.Ftruncate(fd, int64(c.length)))
}

// openable says whether the supervisor opens a file of this type for the tool, and the
// errno it answers otherwise. It opens regular files and directories, and the character
// devices a policy may grant whose open never waits: the memory devices (null, zero, full,
// random, urandom) and pseudo-terminals (a call's terminal). A FIFO's open waits for its
// other end, a device's may wait for its hardware: a bermd thread would wait with it, for
// ever. /dev/tty is the opener's controlling terminal, and the opener would be bermd (or
// the caller's berm run): refused with ENXIO, as to a process with none.
func openable(st *unix.Stat_t) unix.Errno {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK: // a link: the open fails on it (no symlinks)
		return 0
	case unix.S_IFCHR:
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		switch {
		case major == 1 && (minor == 3 || minor == 5 || minor == 7 || minor == 8 || minor == 9):
			return 0
		case major >= 136 && major <= 143: // /dev/pts/N
			return 0
		case major == 5 && minor == 0:
			return unix.ENXIO
		}
	}
	return unix.EPERM
}

// refuseUnopenable answers an open of what the supervisor does not open, with a denial in
// the trail saying why.
func (s *Supervisor) refuseUnopenable(o *op, st *unix.Stat_t) unix.Errno {
	e := openable(st)
	if e == unix.EPERM {
		s.emitEvent(o, event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: event.LayerApproval, Surface: event.SurfaceApproval,
			Rule: "spec.approvals: a write-open of " + fileType(st) + " (the supervisor opens regular files, directories and the granted devices only)", Object: o.object}})
	}
	return e
}

func fileType(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFCHR:
		return "a character device"
	}
	return "a special file"
}

// openNoBlock opens the one name in l's directory with the tool's flags, never waiting: what
// is there is looked at first without opening it (O_PATH, fstat) and refused unless openable;
// then it is opened with O_NONBLOCK added (a FIFO or a device swapped in meanwhile cannot
// hold the open; a lease answers EWOULDBLOCK instead of waiting for its break) and checked
// to be what was looked at; O_NONBLOCK is then taken off again unless the tool asked for it.
func (s *Supervisor) openNoBlock(o *op, l loc, flags int, mode uint32) (int, unix.Errno) {
	var before unix.Stat_t
	looked := false
	pfd, err := openBeneath(l, unix.O_PATH|unix.O_NOFOLLOW, 0)
	switch {
	case err == nil:
		err = unix.Fstat(pfd, &before)
		unix.Close(pfd)
		if err != nil {
			return -1, errnoOf(err)
		}
		if e := s.refuseUnopenable(o, &before); e != 0 {
			return -1, e
		}
		looked = true
	case err != unix.ENOENT:
		return -1, errnoOf(err)
	}
	extra := unix.O_NONBLOCK
	if before.Mode&unix.S_IFMT == unix.S_IFCHR {
		extra |= unix.O_NOCTTY // a terminal never becomes bermd's
	}
	fd, err := openBeneath(l, flags|extra, mode)
	if err != nil {
		return -1, errnoOf(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, errnoOf(err)
	}
	if e := s.refuseUnopenable(o, &st); e != 0 {
		unix.Close(fd)
		return -1, e
	}
	if looked && flags&unix.O_TMPFILE != unix.O_TMPFILE && (st.Dev != before.Dev || st.Ino != before.Ino) {
		unix.Close(fd)
		return -1, unix.EAGAIN // replaced between the look and the open: the tool may try again
	}
	if flags&unix.O_NONBLOCK == 0 {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
		if err != nil {
			unix.Close(fd)
			return -1, errnoOf(err)
		}
	}
	return fd, 0
}

// isDir says whether l names a directory (not following a last symbolic link).
func (l loc) isDir() bool {
	var st unix.Stat_t
	return unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

func prepareExecOf(s *Supervisor, o *op, t *thread) unix.Errno {
	return s.prepareExec(o, t.mem, t.proc, t.pidfd, t.root, t.umask)
}
