package sandboxer

import (
	"encoding/binary"
	"errors"
	"path"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

const (
	// leftoverScanLimit bounds the entries the scan looks at after a call: a workspace past it
	// is scanned in part, and the record says so (LeftoversTruncated).
	leftoverScanLimit = 100_000
	// leftoverReportLimit caps the leftovers listed in the record and the timeline; every one
	// found is still acted on.
	leftoverReportLimit = 100
)

// leftoverScan walks a workspace after its call, by directory file descriptors beneath its
// root: never through a symlink, never across a mount point, so a symlink the tool planted
// (to a host file, or to a host directory full of setuid files and FIFOs) makes the scan
// neither change nor remove anything outside the workspace. Only what changed since the
// call's start (ctime, which no tool can set back) is the call's: a setuid file the owner
// keeps in the workspace, or a hard link to one of the host's, stays as it was.
type leftoverScan struct {
	root         int // the workspace directory
	since        time.Time
	allowSpecial bool // FIFOs, sockets and devices stay (spec.filesystem.allowSpecialFiles)
	audit        bool // report, change nothing
	limit        int  // entries

	entries   int
	found     []event.Leftover
	unlisted  int  // acted on, past the report cap
	truncated bool // the scan stopped before the end of the workspace
}

const keptAllowed = "kept (spec.filesystem.allowSpecialFiles)"

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// run scans breadth first, by paths relative to the root: no descriptor is held per level,
// so depth costs nothing but path length (a path too long to open is reported as truncated).
func (s *leftoverScan) run() {
	queue := []string{"."}
	buf := make([]byte, 32<<10)
	for len(queue) > 0 && !s.truncated {
		dir := queue[0]
		queue = queue[1:]
		fd, err := unix.Openat2(s.root, dir, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: resolveBeneath,
		})
		switch {
		case err == unix.EXDEV || err == unix.ELOOP || err == unix.ENOTDIR || err == unix.ENOENT:
			continue // a mount point (not the call's), or replaced since it was listed
		case err != nil:
			s.truncated = true // not scanned: the record must not claim the workspace is clean
			continue
		}
		queue = s.dir(fd, dir, buf, queue)
		unix.Close(fd)
	}
}

// dir looks at every entry of one directory and returns the queue with its subdirectories.
func (s *leftoverScan) dir(fd int, rel string, buf []byte, queue []string) []string {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			s.truncated = true
			return queue
		}
		if n <= 0 {
			return queue
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name (NUL-terminated).
		for off := 0; off < n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			if s.entries++; s.entries > s.limit {
				s.truncated = true
				return queue
			}
			switch typ {
			case unix.DT_DIR:
				queue = append(queue, path.Join(rel, string(name)))
			case unix.DT_LNK:
			default:
				if s.entry(fd, rel, string(name)) {
					queue = append(queue, path.Join(rel, string(name))) // a file system without d_type
				}
			}
		}
	}
}

// entry judges one entry not listed as a directory (by lstat: the name is never followed)
// and acts on it; it says whether the entry is a directory after all.
func (s *leftoverScan) entry(dirfd int, dir, name string) (isDir bool) {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true
	}
	if time.Unix(st.Ctim.Unix()).Before(s.since) {
		return false // not the call's
	}
	rel := path.Join(dir, name)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) == 0 {
			return
		}
		kind := "setuid"
		switch {
		case st.Mode&unix.S_ISUID != 0 && st.Mode&unix.S_ISGID != 0:
			kind = "setuid+setgid"
		case st.Mode&unix.S_ISGID != 0:
			kind = "setgid"
		}
		s.report(rel, kind, s.act(func() error { return clearSetid(dirfd, name) }, "cleared"))
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK:
		kind := map[uint32]string{unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "device", unix.S_IFBLK: "device"}[st.Mode&unix.S_IFMT]
		if s.allowSpecial {
			s.report(rel, kind, keptAllowed)
			return false
		}
		s.report(rel, kind, s.act(func() error { return unix.Unlinkat(dirfd, name, 0) }, "removed"))
	}
	return false
}

func (s *leftoverScan) act(do func() error, done string) string {
	if s.audit {
		return "kept (audit mode)"
	}
	if err := do(); err != nil {
		return "failed: " + err.Error()
	}
	return done
}

func (s *leftoverScan) report(rel, kind, action string) {
	if len(s.found) >= leftoverReportLimit {
		s.unlisted++
		return
	}
	s.found = append(s.found, event.Leftover{Path: rel, Kind: kind, Action: action})
}

// clearSetid drops the setuid and setgid bits of the regular file name in dirfd. It works on
// the inode it checked: an O_PATH descriptor opened without following a symlink, changed
// through its /proc/self/fd link (which names that inode, whatever happens to the name).
func clearSetid(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("no longer a regular file")
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), st.Mode&0o7777&^(unix.S_ISUID|unix.S_ISGID))
}

// leftovers scans the workspace once the call's processes are dead, acts on what it finds,
// and reports each as a denial of the call (what the policy allows, only in the record).
func (q *callQuota) leftovers(call CallRecorder, workspace string) ([]event.Leftover, bool) {
	if q == nil {
		return nil, false
	}
	s := leftoverScan{root: q.dir, since: q.since, allowSpecial: q.allowSpecial, audit: q.audit, limit: leftoverScanLimit}
	s.run()
	for _, lo := range s.found {
		if lo.Action == keptAllowed {
			continue
		}
		rule := "no setuid or setgid file is left in the workspace"
		if lo.Kind == "fifo" || lo.Kind == "socket" || lo.Kind == "device" {
			rule = "spec.filesystem.allowSpecialFiles: false"
		}
		call.Emit(event.Event{Kind: event.KindDenial, Denial: &event.Denial{
			Layer: event.LayerLeftovers, Surface: event.SurfaceIsolation, Rule: rule + " (" + lo.Action + ")",
			Object: path.Join(workspace, lo.Path), Audit: q.audit,
		}})
	}
	return s.found, s.truncated || s.unlisted > 0
}
