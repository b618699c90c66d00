package sandboxer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
)

// workspaceDir is a call's workspace, resolved once and held open: the path is looked up
// again by nothing (not the owner check, not the mount), so a symlink planted after the check,
// by an earlier call for instance, changes nothing.
type workspaceDir struct {
	Path     string // absolute, free of symlinks
	UID, GID uint32 // its owner on the host: whom the tool's files belong to
	fd       int    // O_PATH
}

func (w *workspaceDir) Close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

const noLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openWorkspaceDir resolves the workspace path a caller gave. A path through a symlink is
// followed only when every symlink on the way belongs to the owner of the directory it leads
// to, and that directory is in no tree the policy denies: agent frameworks hand a later call
// a path inside an earlier call's workspace (WS/proj), and that call could have made proj a
// symlink to another user's home; the later call must be refused, not run as that user.
func openWorkspaceDir(given string, deny []string) (*workspaceDir, error) {
	given, err := filepath.Abs(given)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	fd, err := openNoLinks(given)
	resolved := given
	var links []string
	if errors.Is(err, unix.ELOOP) {
		if links, err = symlinksOn(given); err != nil {
			return nil, fmt.Errorf("workspace %s: %w", given, err)
		}
		if resolved, err = filepath.EvalSymlinks(given); err != nil {
			return nil, fmt.Errorf("workspace %s: %w", given, err)
		}
		fd, err = openNoLinks(resolved)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", given, err)
	}
	w := &workspaceDir{Path: resolved, fd: fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.Close()
		return nil, fmt.Errorf("workspace %s: %w", given, err)
	}
	w.UID, w.GID = st.Uid, st.Gid
	if len(links) > 0 {
		if err := checkLinks(given, resolved, links, st.Uid, deny); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

func openNoLinks(path string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: noLinks,
	})
}

// symlinksOn lists the symlinks met resolving path, each with its owner, link by link.
func symlinksOn(path string) ([]string, error) {
	var out []string
	cur := "/"
	rest := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for hops := 0; len(rest) > 0; hops++ {
		if hops > 40 {
			return nil, unix.ELOOP
		}
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		out = append(out, next)
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return out, nil
}

// checkLinks refuses a workspace reached through a symlink that is not its owner's, or into
// a denied tree.
func checkLinks(given, resolved string, links []string, owner uint32, deny []string) error {
	for _, d := range deny {
		if resolved == d || strings.HasPrefix(resolved, strings.TrimSuffix(d, "/")+"/") {
			return fmt.Errorf("workspace %s leads through the symlink %s to %s, inside %s, which the policy denies: refusing it; name the real path of a workspace you mean to grant", given, links[0], resolved, d)
		}
	}
	for _, l := range links {
		var st unix.Stat_t
		if err := unix.Lstat(l, &st); err != nil {
			return fmt.Errorf("workspace %s: %w", given, err)
		}
		if st.Uid != owner {
			return fmt.Errorf("workspace %s leads through the symlink %s (owned by uid %d) to %s, owned by uid %d: refusing it (a symlink is followed only to its owner's files); name the real path", given, l, st.Uid, resolved, owner)
		}
	}
	return nil
}

// idmappedTree detaches a copy of the workspace's mount (no sub-mounts) whose owner's files
// show as the sandbox's host ids, and the other way round: inside the call the tool (its
// user namespace maps ToolUID to hostUID) owns the workspace, and what it creates belongs to
// the workspace's owner on the host. Files of anyone else map to nobody. The mount is also
// nosuid and nodev, and noexec when asked.
func idmappedTree(w *workspaceDir, sb *sandbox, noexec bool) (int, error) {
	tree, err := unix.OpenTree(w.fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open workspace %s: %w", w.Path, err)
	}
	userns, err := sb.idmapFor(w.UID, w.GID)
	if err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("workspace %s: %w", w.Path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
	if noexec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("idmap workspace %s (its file system must support idmapped mounts): %w", w.Path, err)
	}
	return tree, nil
}

// mappingUserns returns a user namespace mapping uid to hostUID and gid to hostGID, for an
// idmapped mount. It is a short-lived child's: the namespace lives on with the returned fd.
//
// Every other id is mapped too (idmapSwap), to an id the tool's own namespace does not map:
// a file of someone else in the workspace (the root-owned directory a host mount sits on, the
// seed incident's bucket) then has a valid owner the tool is not, and the kernel refuses its
// deletion with EPERM (EBUSY for a mount point of the tool's own). Left unmapped, its owner
// is invalid and the same refusal reads EOVERFLOW ("Value too large for defined data type"),
// which tells the tool nothing. No permission is gained: the tool's fsuid and fsgid are the
// host ids the owner's map to, its supplementary groups are dropped, and no other id maps
// to them.
//
// The namespace is made by the stage's binary (stage, cmd/berm-stage --userns), executed: an
// exec.Cmd with CLONE_NEWUSER cannot vfork, and forking bermd copied all its mappings for
// every warm sandbox while holding syscall.ForkLock, which every other start of bermd waits on.
func mappingUserns(stage string, uid, hostUID, gid, hostGID uint32) (_ int, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("user namespace for the idmapped mount: %w", err)
		}
	}()
	cmd := exec.Command(stage, "--userns")
	cmd.Env = []string{}
	hold, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	said, err := cmd.StdoutPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%s --userns: %w", stage, err)
	}
	// Ending its stdin ends it; it is reaped only then, so its pid stays its own meanwhile.
	defer func() {
		hold.Close()
		if werr := cmd.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("%s --userns: %w", stage, werr)
		}
	}()
	var r [1]byte
	if n, _ := said.Read(r[:]); n != 1 || r[0] != 'r' {
		return -1, fmt.Errorf("%s --userns: no user namespace (it unshares CLONE_NEWUSER)", stage)
	}
	proc := fmt.Sprintf("/proc/%d/", cmd.Process.Pid)
	for _, w := range []struct{ file, text string }{
		{"setgroups", "deny"}, // as os/exec writes it with GidMappings
		{"uid_map", idmapText(idmapSwap(uid, hostUID))},
		{"gid_map", idmapText(idmapSwap(gid, hostGID))},
	} {
		if err := os.WriteFile(proc+w.file, []byte(w.text), 0); err != nil {
			return -1, err
		}
	}
	fd, err := unix.Open(proc+"ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// idmapText is m as a uid_map or gid_map takes it: in one write, a line per range.
func idmapText(m []syscall.SysProcIDMap) string {
	var b strings.Builder
	for _, r := range m {
		fmt.Fprintf(&b, "%d %d %d\n", r.ContainerID, r.HostID, r.Size)
	}
	return b.String()
}

// maxID is one past the largest valid id: (uid_t)-1 is no id.
const maxID = 1<<32 - 1

// idmapSwap is the identity map of every id with id and host swapped: id is host's inside,
// and host, if anything on disk has it, is id's (unmapped in the tool's namespace, which
// maps only its own id to host). Each id maps to exactly one, as a user namespace requires.
func idmapSwap(id, host uint32) []syscall.SysProcIDMap {
	if id == host {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: maxID}}
	}
	lo, hi := min(id, host), max(id, host)
	var m []syscall.SysProcIDMap
	ident := func(from, to uint64) { // [from, to)
		if to > from {
			m = append(m, syscall.SysProcIDMap{ContainerID: int(from), HostID: int(from), Size: int(to - from)})
		}
	}
	ident(0, uint64(lo))
	m = append(m, syscall.SysProcIDMap{ContainerID: int(lo), HostID: int(hi), Size: 1})
	ident(uint64(lo)+1, uint64(hi))
	m = append(m, syscall.SysProcIDMap{ContainerID: int(hi), HostID: int(lo), Size: 1})
	ident(uint64(hi)+1, maxID)
	return m
}

// deniedTrees are the policy's denied paths that do not depend on the call.
func deniedTrees(p *policy.Policy) []string {
	var out []string
	for _, d := range p.Spec.Filesystem.Deny {
		if !strings.Contains(d, "${") {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

// retargetHome points HOME at the resolved workspace when it named the path as given.
func retargetHome(env []string, given, resolved string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		if kv == "HOME="+given {
			kv = "HOME=" + resolved
		}
		out[i] = kv
	}
	return out
}
