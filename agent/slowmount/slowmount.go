// Package slowmount tells whether a path is on a slow file system (FUSE, or a network one)
// without asking that file system anything. A look-up, a stat or an open on one is a request
// to its server, which may never answer; a thread waiting for the answer cannot be freed (a
// signal only asks the server to give up, and once the request is read the kernel waits for
// its answer uninterruptibly). So berm's own threads (the approval supervisor, the judge of a
// call's events) ask the kernel which mount a path is on first, with statx for STATX_MNT_ID
// and AT_STATX_DONT_SYNC (which neither FUSE nor NFS forwards to their server), look the
// mount up in a mount table, and leave alone what is on a slow file system.
package slowmount

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// SlowType says whether a file system type is served by a process or a network: every
// look-up in it may wait for an answer that never comes.
func SlowType(fstype string) bool {
	switch fstype {
	case "fuse", "fuseblk", "virtiofs", "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "afs", "coda",
		"ncpfs", "orangefs", "glusterfs", "lustre", "gfs2", "ocfs2", "davfs", "vboxsf", "vmhgfs":
		return true
	}
	return strings.HasPrefix(fstype, "fuse.") || strings.HasPrefix(fstype, "fuseblk.")
}

// Mount is one mount of a mount table.
type Mount struct{ FSType, Point string }

// String names the mount as a denial does: "fuse.sshfs file system at /mnt/x".
func (m *Mount) String() string {
	if m.Point == "" {
		return m.FSType
	}
	return m.FSType + " file system at " + m.Point
}

// Parse reads a mount table (the format of /proc/PID/mountinfo), by mount id, and says
// whether it holds a slow file system.
func Parse(r io.Reader) (map[uint64]Mount, bool, error) {
	mounts := map[uint64]Mount{}
	slow := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		_, after, ok := strings.Cut(line, " - ")
		if len(fields) < 5 || !ok {
			return nil, false, fmt.Errorf("malformed mount table line %q", line)
		}
		id, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("mount table: %w", err)
		}
		fstype, _, _ := strings.Cut(after, " ")
		mounts[id] = Mount{FSType: fstype, Point: fields[4]}
		slow = slow || SlowType(fstype)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read a mount table: %w", err)
	}
	return mounts, slow, nil
}

// Stat is what Probe learns of a path: its type (the S_IFMT bits) and its mount.
type Stat struct {
	Mode  uint16
	MntID uint64
}

// Probe asks the kernel for path's type and mount (relative to dir; dir itself with
// AT_EMPTY_PATH for ""), not following a last symbolic link, and nothing else:
// AT_STATX_DONT_SYNC, so FUSE and NFS answer from their cache. The look-up of path's last
// name is the caller's to make safe: the directory holding it must not be on a slow file
// system (the look-up of a name in a FUSE directory is a request to its server).
func Probe(dir int, path string) (Stat, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var stx unix.Statx_t
	if err := unix.Statx(dir, path, flags, unix.STATX_TYPE|unix.STATX_MNT_ID, &stx); err != nil {
		return Stat{}, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return Stat{Mode: stx.Mode & unix.S_IFMT}, nil // MntID 0: no mount is numbered 0
	}
	return Stat{Mode: stx.Mode & unix.S_IFMT, MntID: stx.Mnt_id}, nil
}

// Host is the agent's own mount table (the host's, for bermd), read once and read again only
// when the kernel says it changed (poll on /proc/self/mountinfo): asking it is a map look-up
// and, at most, one poll with no wait.
type Host struct {
	mu     sync.Mutex
	f      *os.File
	mounts map[uint64]Mount
	err    error
}

// HostTable is the process's mount table, shared by every call.
var HostTable = &Host{}

// Slow says whether the mount numbered id is a slow file system's, and which; a mount the
// table does not know (or a table that cannot be read) counts as slow: what serves it is
// unknown.
func (h *Host) Slow(id uint64) *Mount {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refresh()
	if h.err != nil {
		return &Mount{FSType: "unknown (berm cannot read its mount table: " + h.err.Error() + ")"}
	}
	m, ok := h.mounts[id]
	if !ok {
		h.reread() // a mount made since the table was read, not yet signalled
		if m, ok = h.mounts[id]; !ok {
			return &Mount{FSType: fmt.Sprintf("unknown (mount %d is not in berm's mount table)", id)}
		}
	}
	if SlowType(m.FSType) {
		return &m
	}
	return nil
}

// refresh reads the table at the first use, and again when the kernel signals a change.
func (h *Host) refresh() {
	if h.f == nil {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			h.err = fmt.Errorf("open the mount table: %w", err)
			return
		}
		h.f = f
		h.reread()
		return
	}
	fds := []unix.PollFd{{Fd: int32(h.f.Fd()), Events: unix.POLLPRI | unix.POLLERR}}
	if n, err := unix.Poll(fds, 0); err == nil && n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
		h.reread()
	}
}

// reread reads the table from its start (which also clears the kernel's change signal).
func (h *Host) reread() {
	if h.f == nil {
		return
	}
	if _, err := h.f.Seek(0, io.SeekStart); err != nil {
		h.err = fmt.Errorf("read the mount table: %w", err)
		return
	}
	mounts, _, err := Parse(h.f)
	if err != nil {
		h.err = err
		return
	}
	h.mounts, h.err = mounts, nil
}
