package approval

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/slowmount"
)

// The supervisor never asks a slow file system anything. A look-up, a stat or an open on a
// FUSE file system is a request to its server, and on a network file system (NFS, CIFS, 9p,
// Ceph...) a request to a remote one; either may never answer, and a thread waiting for the
// answer cannot be freed: a signal only asks the server to give up (FUSE's INTERRUPT, which a
// hung or hostile server ignores), and once the request is read, the kernel waits for its
// answer uninterruptibly. A bermd thread waiting there is lost, and with it the call's end
// (an embedded berm cannot exit while it waits). Aborting the connection
// (/sys/fs/fuse/connections/N/abort) would break the file system for everyone who uses it.
// So the supervisor refuses, before touching them, the held syscalls whose paths lead into
// such a file system: it walks each path itself, one name at a time, and before it looks up
// a name in a directory (or stats what it found) it asks the kernel which mount that
// directory is on (statx with STATX_MNT_ID alone and AT_STATX_DONT_SYNC, which neither FUSE
// nor NFS forwards to their server) and looks the mount up in the tool's mount table.

// mount is one mount of the tool's mount table (agent/slowmount, shared with the judge of
// the call's events, which asks the host's table the same way).
type mount = slowmount.Mount

// mountTable is the tool's mount table, by mount id, when it holds a slow file system (nil
// when it holds none: paths are resolved by the kernel in one openat2, as nothing can wait).
// The tool's table is fixed from its start (the sandbox's mounts are private: nothing the
// host mounts later appears in it), so it is read once per call.
type mountTable struct {
	mounts map[uint64]slowmount.Mount
}

// readMountTable reads a thread's mount table (/proc/TID/mountinfo); nil when it holds no
// slow file system.
func readMountTable(proc string) (*mountTable, error) {
	f, err := os.Open(proc + "/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the tool's mount table: %w", err)
	}
	defer f.Close()
	mounts, slow, err := slowmount.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("read the tool's mount table: %w", err)
	}
	if !slow {
		return nil, nil
	}
	return &mountTable{mounts: mounts}, nil
}

// slowAt says whether name in dir (dir itself for "") is on a slow file system, asking the
// kernel for its mount only: statx with STATX_MNT_ID and nothing else, AT_STATX_DONT_SYNC
// (FUSE and NFS answer it from their cache), not following a last symbolic link. A mount
// missing from the table (made after it was read) counts as slow: the supervisor does not
// know what serves it. ENOENT: nothing there.
func (m *mountTable) slowAt(dir int, name string) (*mount, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var stx unix.Statx_t
	if err := unix.Statx(dir, name, flags, unix.STATX_MNT_ID, &stx); err != nil {
		return nil, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return &mount{FSType: "unknown (the kernel gave no mount id)"}, nil
	}
	mt, ok := m.mounts[stx.Mnt_id]
	switch {
	case !ok:
		return &mount{FSType: fmt.Sprintf("unknown (mount %d, not in the tool's mount table)", stx.Mnt_id)}, nil
	case slowmount.SlowType(mt.FSType):
		return &mt, nil
	}
	return nil, nil
}

// slowFS is a path refused because it leads into a slow file system.
type slowFS struct {
	path string // as the tool named it
	on   *mount
}

// walkDir opens directory p, relative to start or (absolute) from the thread's root (the
// acting thread is chrooted there), the way the kernel walks it: symbolic links followed
// (40 at most, absolute ones from the root, magic links refused), '..' stopped at the root.
// It goes one name at a time, and looks nothing up in a directory on a slow file system,
// nor stats anything found on one: it answers with the slow mount instead.
func (m *mountTable) walkDir(start int, p string) (int, unix.Errno, *mount) {
	open := func(base int, name string) (int, error) {
		return unix.Openat(base, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	var cur int
	var err error
	if strings.HasPrefix(p, "/") {
		cur, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		cur, err = open(start, ".")
	}
	if err != nil {
		return -1, errnoOf(err), nil
	}
	fail := func(e unix.Errno, on *mount, fds ...int) (int, unix.Errno, *mount) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, e, on
	}
	names := strings.Split(p, "/")
	links := 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		if name == "" || name == "." {
			continue
		}
		if on, err := m.slowAt(cur, ""); err != nil || on != nil {
			return fail(errnoOf(err), on, cur)
		}
		next, err := open(cur, name)
		if err != nil {
			return fail(errnoOf(err), nil, cur)
		}
		if on, err := m.slowAt(next, ""); err != nil || on != nil {
			return fail(errnoOf(err), on, cur, next)
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			return fail(errnoOf(err), nil, cur, next)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			unix.Close(cur)
			cur = next
			continue
		case unix.S_IFLNK:
		default:
			return fail(unix.ENOTDIR, nil, cur, next)
		}
		if links++; links > 40 || magicLink(cur, next) {
			return fail(unix.ELOOP, nil, cur, next)
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(next, "", buf)
		unix.Close(next)
		if err != nil {
			return fail(errnoOf(err), nil, cur)
		}
		target := string(buf[:n])
		if strings.HasPrefix(target, "/") {
			unix.Close(cur)
			if cur, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return -1, errnoOf(err), nil
			}
		}
		names = append(strings.Split(target, "/"), names...)
	}
	if on, err := m.slowAt(cur, ""); err != nil || on != nil {
		return fail(errnoOf(err), on, cur)
	}
	return cur, 0, nil
}

// magicLink says whether link (in dir) is one of procfs's magic links (/proc/PID/fd/N,
// cwd, root, exe, ns/..., map_files/...): every symbolic link of procfs but those in its
// root (self, thread-self, mounts, net), which are plain text.
func magicLink(dir, link int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(link, &fs) != nil {
		return true
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(dir, &st) != nil || st.Ino != 1 // procfs's root is inode 1
}

// refuseSlow answers a held syscall whose path leads into a slow file system: EPERM, with a
// denial in the trail naming the file system.
func (s *Supervisor) refuseSlow(o *op, r *slowFS) unix.Errno {
	s.cfg.Log.Warn("approval: a held syscall on a slow file system refused", "call", s.cfg.Call.CallID, "syscall", o.name,
		"fstype", r.on.FSType, "mount", r.on.Point)
	where := r.on.FSType
	if r.on.Point != "" {
		where += " file system at " + r.on.Point
	}
	s.emitEvent(o, event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: event.LayerApproval, Surface: event.SurfaceApproval,
		Rule:   "spec.approvals: " + o.name + " on a " + where + " (the supervisor does not wait on a FUSE or network file system's server)",
		Object: r.path}})
	return unix.EPERM
}

// mountTableOf is the call's mount table (read once, at its first held path syscall, from
// the held thread's /proc directory before the acting thread is confined).
func (s *Supervisor) mountTableOf(proc string) (*mountTable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mountsRead {
		return s.mounts, nil
	}
	m, err := readMountTable(proc)
	if err != nil {
		return nil, err
	}
	s.mounts, s.mountsRead = m, true
	return m, nil
}
