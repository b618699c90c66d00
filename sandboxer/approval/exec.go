package approval

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"math"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// How an exec is held to what was decided. Nobody can exec for the tool: a held execve is
// released with SECCOMP_USER_NOTIF_FLAG_CONTINUE, and the kernel then copies path and argv
// again from memory another thread may have rewritten. So the supervisor reads path and argv
// once, finds the file's identity from the tool's root and cwd (or dirfd), and decides on
// that: a gated program (an exec rule's file, however it is named: a link, /bin for
// /usr/bin) with argv matching a rule's pattern asks a person; a gated program with other
// argv goes at once; any other file goes at once. For a gated program the supervisor writes
// a one-shot entry (the thread, the file's dev and inode, the exact argv bytes) into the
// kernel's exec gate right before CONTINUE. The exec hook (bpf/lib/execgate.h), after the
// point of no return and before the new image's first instruction, compares the file that
// runs and the argv the kernel copied with the entry, and kills the exec (SIGKILL, with a
// denial event) on a mismatch or on an exec of a gated program with no entry: what runs is
// what was decided, or nothing.
//
// The dynamic loader run directly (ld.so PROGRAM) executes the loader, not the gated file:
// the gated programs' loaders are gated too, with no rule, so run directly they are refused.
// What it does not hold: a copy of a gated program elsewhere is another file (the policy's
// exec rights decide where a tool may execute from).

// ExecGate is the kernel's exec gate of one call (tracer.ExecGate).
type ExecGate interface {
	Gate(dev uint32, ino uint64) error
	Allow(tid uint32, dev uint32, ino uint64, argv []byte) error
	Revoke(tid uint32) error
}

// ExecArgvMax is what the kernel's gate can hold of an exec's argv (BERM_XG_ARGV_MAX).
const ExecArgvMax = 4096

// execContinue is what perform returns when the held exec is to continue.
const execContinue = math.MinInt64 + 1

type fileID struct {
	dev uint32
	ino uint64
}

func statID(st *unix.Stat_t) fileID {
	return fileID{dev: unix.Major(st.Dev)<<20 | unix.Minor(st.Dev), ino: st.Ino}
}

// statInRoot stats absolute path p as seen from root (a chroot's walk: '..' and absolute
// links stay inside).
func statInRoot(root int, p string, nofollow bool, st *unix.Stat_t) error {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if nofollow {
		how.Flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat2(root, p, &how)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// gateExecs finds the exec rules' programs in the call's root and gates them in the kernel,
// once per call.
func (s *Supervisor) gateExecs(root int) unix.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.execIDs != nil {
		return 0
	}
	ids := map[*policy.ApprovalRule]fileID{}
	for i := range s.cfg.Rules.Rules {
		r := &s.cfg.Rules.Rules[i]
		if r.Action != policy.ApproveExec {
			continue
		}
		var st unix.Stat_t
		if err := statInRoot(root, r.Path, false, &st); err != nil {
			// Not in the call's root: nothing to run there by that name. A file put there
			// later is not gated (the call's root is the launcher's, read-only).
			s.cfg.Log.Warn("approval: exec rule's program not in the call's root", "call", s.cfg.Call.CallID, "rule", r.Name, "path", r.Path, "err", err)
			continue
		}
		id := statID(&st)
		if err := s.cfg.Exec.Gate(id.dev, id.ino); err != nil {
			s.cfg.Log.Error("approval: gate exec", "call", s.cfg.Call.CallID, "rule", r.Name, "err", err)
			return unix.EPERM
		}
		// The program's dynamic loader run directly (ld.so PROGRAM ARGS) would run the
		// program with the loader's identity: the loader is gated too, with no rule, so the
		// supervisor refuses it and the exec hook kills it when raced.
		if interp := elfInterp(root, r.Path); interp != "" {
			var lst unix.Stat_t
			if err := statInRoot(root, interp, false, &lst); err == nil {
				lid := statID(&lst)
				if err := s.cfg.Exec.Gate(lid.dev, lid.ino); err != nil {
					s.cfg.Log.Error("approval: gate exec", "call", s.cfg.Call.CallID, "rule", r.Name, "loader", interp, "err", err)
					return unix.EPERM
				}
				s.loaders[lid] = interp
			}
		}
		ids[r] = id
	}
	s.execIDs = ids
	return 0
}

// prepareExec reads a held execve or execveat and decides what it needs.
func (s *Supervisor) prepareExec(o *op, mem *os.File, proc string, pidfd, root, umask int) unix.Errno {
	args := o.n.Data.Args
	o.action = policy.ApproveExec
	atCWD := int32(unix.AT_FDCWD)
	dirfd, pathAddr, argvAddr, flags := uint64(uint32(atCWD)), args[0], args[1], uint64(0)
	if o.name == "execveat" {
		dirfd, pathAddr, argvAddr, flags = args[0], args[1], args[2], args[4]
	}
	p, e := readString(mem, pathAddr)
	if e != 0 {
		return e
	}
	argv, raw, long, e := readArgv(mem, argvAddr)
	if e != 0 {
		return e
	}
	start := -1
	if !strings.HasPrefix(p, "/") {
		var err error
		if int32(dirfd) == unix.AT_FDCWD {
			start, err = unix.Open(proc+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		} else {
			start, err = unix.PidfdGetfd(pidfd, int(int32(dirfd)), 0)
		}
		if err != nil {
			return unix.EBADF
		}
		o.cleanup = append(o.cleanup, func() { unix.Close(start) })
	}
	if !idValid(s.fd, o.n.ID) {
		return unix.ESRCH
	}
	// An absolute path (what a shell's PATH search gives) is resolved from the tool's root
	// with RESOLVE_IN_ROOT, which is a chroot's walk, on this thread as it is: no jail, and
	// the thread goes back to the runtime. A relative one needs the jail (its '..' may leave
	// the start directory). Either way the kernel's exec hook has the last word: a
	// resolution that missed a gated program ends in a kill, never in an unasked run.
	// With a slow file system in the tool's mount table, the program is found by the
	// supervisor's own walk (slowfs.go), jailed: nothing is asked of a FUSE or network file
	// system's server. A program on one is not looked up: the exec continues, and the kernel's
	// exec hook decides (a gated program there is killed, never run unasked).
	mt, err := s.mountTableOf(proc)
	if err != nil {
		s.cfg.Log.Error("approval: the tool's mount table", "call", s.cfg.Call.CallID, "err", err)
		return unix.EPERM
	}
	fast := strings.HasPrefix(p, "/") && mt == nil
	if !fast {
		o.jailed = true
		if err := s.jail(root, umask); err != nil {
			s.cfg.Log.Error("approval: confine the acting thread", "call", s.cfg.Call.CallID, "err", err)
			return unix.EPERM
		}
	}
	if e := s.gateExecs(root); e != 0 {
		return e
	}
	tid := o.n.PID
	// Not a gated program (so far): it continues, with any entry of the thread dropped.
	o.perform = func() (int64, unix.Errno) {
		if err := s.cfg.Exec.Revoke(tid); err != nil {
			return 0, unix.EPERM
		}
		return execContinue, 0
	}
	var st unix.Stat_t
	switch {
	case mt != nil && !(p == "" && flags&unix.AT_EMPTY_PATH != 0):
		l, e, on := resolve(mt, start, p, flags&unix.AT_SYMLINK_NOFOLLOW == 0)
		if on != nil {
			s.cfg.Log.Warn("approval: a program on a slow file system not looked up: the kernel's exec hook decides", "call", s.cfg.Call.CallID,
				"path", s.redact(o, p), "fstype", on.FSType, "mount", on.Point)
			return 0
		}
		if e != 0 {
			err = e
			break
		}
		err = unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		l.close()
	case fast:
		err = statInRoot(root, p, flags&unix.AT_SYMLINK_NOFOLLOW != 0, &st)
	case p == "" && flags&unix.AT_EMPTY_PATH != 0:
		err = unix.Fstat(start, &st)
	default:
		err = unix.Fstatat(start, p, &st, int(flags&unix.AT_SYMLINK_NOFOLLOW))
	}
	if err != nil {
		// The kernel's exec fails the same way, or finds a file put there since: if that is
		// a gated program, the exec hook kills it (no entry). A PATH search's miss (a
		// directory without the program) does not end the thread's search.
		o.absent = true
		return 0
	}
	id := statID(&st)
	var gated []*policy.ApprovalRule
	s.mu.Lock()
	loader, isLoader := s.loaders[id]
	for r, rid := range s.execIDs {
		if rid == id {
			gated = append(gated, r)
		}
	}
	s.mu.Unlock()
	if isLoader && len(gated) == 0 {
		s.cfg.Log.Warn("approval: the dynamic loader of a gated program run directly: refused", "call", s.cfg.Call.CallID, "loader", loader,
			"argv", s.redact(o, strings.Join(argv, " ")))
		s.emitEvent(o, event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: event.LayerApproval, Surface: event.SurfaceApproval,
			Rule: "spec.approvals exec: the dynamic loader of a gated program run directly", Object: strings.TrimSpace(loader + " " + strings.Join(argv[min(1, len(argv)):], " "))}})
		return unix.EPERM
	}
	if len(gated) == 0 {
		return 0
	}
	if long {
		s.cfg.Log.Warn("approval: gated exec's argv too long to hold", "call", s.cfg.Call.CallID, "path", s.redact(o, p))
		return unix.E2BIG
	}
	if isScript(root, start, p, flags, fast) {
		// The kernel runs the interpreter with argv of its own making: nothing to hold the
		// exec to. Gate the interpreter instead.
		s.cfg.Log.Warn("approval: a gated program is a script", "call", s.cfg.Call.CallID, "path", s.redact(o, p))
		return unix.EPERM
	}
	joined := strings.Join(argv[min(1, len(argv)):], " ")
	o.exec = &execTry{id: id, argv: string(raw), path: p}
	o.object = strings.TrimSpace(gated[0].Path + " " + joined)
	o.rule = s.match(func(r *policy.ApprovalRule) bool {
		for _, g := range gated {
			if g == r {
				return r.Argv == nil || r.Argv.MatchString(joined)
			}
		}
		return false
	})
	o.perform = func() (int64, unix.Errno) {
		if err := s.cfg.Exec.Allow(tid, id.dev, id.ino, raw); err != nil {
			s.cfg.Log.Error("approval: allow exec", "call", s.cfg.Call.CallID, "err", err)
			return 0, unix.EPERM
		}
		return execContinue, 0
	}
	return 0
}

// elfInterp is the program's PT_INTERP (its dynamic loader) in root, or "".
func elfInterp(root int, p string) string {
	fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, prog := range ef.Progs {
		if prog.Type != elf.PT_INTERP || prog.Filesz == 0 || prog.Filesz > 4096 {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}

// isScript says whether the file starts with "#!" (unreadable: no).
func isScript(root, start int, p string, flags uint64, fast bool) bool {
	var fd int
	var err error
	switch {
	case fast:
		fd, err = unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	case p == "" && flags&unix.AT_EMPTY_PATH != 0:
		fd, err = unix.Openat(start, "/proc/self/fd/"+itoa(start), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	case start >= 0:
		fd, err = unix.Openat(start, p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	default:
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var b [2]byte
	n, _ := unix.Pread(fd, b[:], 0)
	return n == 2 && b == [2]byte{'#', '!'}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// readArgv reads an argv array: its strings, and their bytes as the kernel lays them out in
// the new image (each NUL-terminated; an empty argv is one empty string, as the kernel makes
// it). long: more than ExecArgvMax bytes (the strings read stop there).
func readArgv(mem *os.File, addr uint64) (argv []string, raw []byte, long bool, e unix.Errno) {
	var buf bytes.Buffer
	for i := uint64(0); addr != 0; i++ {
		var pb [8]byte
		if _, err := mem.ReadAt(pb[:], int64(addr+8*i)); err != nil {
			return nil, nil, false, unix.EFAULT
		}
		ptr := binary.LittleEndian.Uint64(pb[:])
		if ptr == 0 {
			break
		}
		s, e := readArg(mem, ptr, ExecArgvMax+1-buf.Len())
		if e == unix.E2BIG {
			return argv, nil, true, 0
		}
		if e != 0 {
			return nil, nil, false, e
		}
		argv = append(argv, s)
		buf.WriteString(s)
		buf.WriteByte(0)
		if buf.Len() > ExecArgvMax {
			return argv, nil, true, 0
		}
	}
	if len(argv) == 0 {
		buf.WriteByte(0)
	}
	return argv, buf.Bytes(), false, 0
}

// readArg reads a NUL-terminated string of fewer than max bytes (E2BIG: longer).
func readArg(mem *os.File, addr uint64, max int) (string, unix.Errno) {
	var out []byte
	var buf [256]byte
	for len(out) < max {
		n, err := mem.ReadAt(buf[:], int64(addr)+int64(len(out)))
		if n == 0 && err != nil {
			return "", unix.EFAULT
		}
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			return string(append(out, buf[:i]...)), 0
		}
		out = append(out, buf[:n]...)
	}
	return "", unix.E2BIG
}

// answerContinue lets the held syscall go on in the kernel, which reads its arguments again.
// Only execs are released so (the exec hook holds them to the decision).
func answerContinue(fd int, id uint64) error {
	r := notifResp{ID: id, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	_, err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
	return err
}
