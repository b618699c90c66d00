package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/slowmount"
)

// The judge names a path as the compiled ruleset does (symlinks resolved: /bin is usr/bin),
// which reads the host file system. The paths are the tool's: a chain of workspace symlinks
// and thousands of distinct names through it made each event cost hundreds of lstat and
// readlink calls (filepath.EvalSymlinks follows 255 links before it gives up), and the call's
// worker fell behind until its trail was dropped. The work is bounded instead, and no longer
// a function of what the tool does:
//   - a resolution follows at most maxLinks symlinks (the kernel's own limit: a longer chain
//     failed in the kernel too);
//   - directories are resolved once (a bounded cache), a name in them costs one lstat;
//   - a call's judge spends at most resolveBudget reads of the host file system in all; past
//     it, paths are named as given (cleaned), and the attribution may name a symlink's path
//     rather than its target;
//   - nothing on a slow file system (FUSE, NFS, CIFS, 9p...: agent/slowmount) is looked up: a
//     tool naming a path on a hung host mount, even one outside its view, would park the
//     worker in the kernel for as long as the mount's server does not answer, and the
//     call's trail with it. Each name is stat'ed for its type and mount only (statx with
//     AT_STATX_DONT_SYNC, which FUSE and NFS answer from their cache) in a directory already
//     known not to be on a slow file system; a path leading onto one is judged by its string
//     as the tool gave it, and the denial says it was not resolved and why.
const (
	maxLinks      = 40
	resolveBudget = 1 << 16
)

var errBudget = errors.New("resolve budget spent")

// slowError is a path that leads onto a slow file system: it was not looked up.
type slowError struct{ on *slowmount.Mount }

func (e *slowError) Error() string { return "on a " + e.on.String() }

// mountTable says whether a mount is a slow file system's (slowmount.HostTable).
type mountTable interface {
	Slow(id uint64) *slowmount.Mount
}

// resolution is what the judge knows of a path.
type resolution struct {
	canon string
	// slow: the path leads onto a slow file system, and canon is the path as given.
	slow *slowmount.Mount
	// dirErr: the path's directory does not resolve (why), and canon is the path as given.
	dirErr error
	// spent: the budget was spent before the path was resolved; canon is as given.
	spent bool
}

// unresolved says why a path was not resolved on the host, "" when it was.
func (r resolution) unresolved() string {
	switch {
	case r.slow != nil:
		return fmt.Sprintf("not resolved: on a %s, which berm does not wait on; judged as named", r.slow)
	case r.spent:
		return notLookedUp
	}
	return ""
}

// notLookedUp says why a path was judged by its string alone: past the call's budget of host
// look-ups (a flood of paths the tool made up), berm claims no more than the string says.
const notLookedUp = "not resolved: the call's budget of host look-ups is spent; judged as named"

// resolver keeps a call's canonical names and what resolving them may still cost.
type resolver struct {
	paths  map[string]resolution // full path -> canonical
	dirs   map[string]resolution // directory -> canonical, "" when it does not resolve
	spent  int                   // reads of the host file system so far
	mounts mountTable            // nil: slowmount.HostTable
}

// canonical is path with its symlinks resolved, the directory's when the path itself does
// not resolve (a file not there), or path itself.
func (r *resolver) canonical(path string) string { return r.canonicalOf(path).canon }

func (r *resolver) canonicalOf(path string) resolution {
	// The call's /proc is its own: resolved here, /proc/self/fd/3 would name the agent's own
	// descriptor (a file of the host's), not the tool's.
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return resolution{canon: path}
	}
	if res, ok := r.paths[path]; ok {
		return res
	}
	res := r.resolve(path)
	if r.paths == nil || len(r.paths) >= maxResolved {
		r.paths = make(map[string]resolution, 64)
	}
	r.paths[path] = res
	return res
}

func (r *resolver) resolve(path string) resolution {
	if path == "/" {
		return resolution{canon: path}
	}
	dir, base := filepath.Split(path)
	dir = filepath.Clean(dir)
	cdir, ok := r.dirs[dir]
	if !ok {
		c, err := r.eval(dir)
		var slow *slowError
		switch {
		case errors.As(err, &slow):
			cdir = resolution{slow: slow.on}
		case errors.Is(err, errBudget):
			return resolution{canon: path, spent: true} // not cached, named as given
		case err != nil:
			cdir = resolution{dirErr: err}
		default:
			cdir = resolution{canon: c}
		}
		if r.dirs == nil || len(r.dirs) >= maxResolved {
			r.dirs = make(map[string]resolution, 64)
		}
		r.dirs[dir] = cdir
	}
	if cdir.slow != nil || cdir.dirErr != nil {
		cdir.canon = path
		return cdir
	}
	joined := filepath.Join(cdir.canon, base)
	found := func(c string, err error) resolution {
		var slow *slowError
		switch {
		case errors.As(err, &slow):
			return resolution{canon: path, slow: slow.on}
		case err != nil:
			return resolution{canon: joined}
		}
		return resolution{canon: c}
	}
	if base == "." || base == ".." {
		return found(r.eval(joined))
	}
	if !r.take() {
		return resolution{canon: joined, spent: true}
	}
	mode, err := r.lstat(joined)
	if err != nil || mode != unix.S_IFLNK {
		var slow *slowError
		if errors.As(err, &slow) {
			return resolution{canon: path, slow: slow.on}
		}
		return resolution{canon: joined}
	}
	return found(r.eval(joined))
}

// lstat is the type of path (not following a last symbolic link), asked of the kernel with
// its mount only: a path on a slow file system is a slowError, and nothing more is asked of
// it. The directory holding path must be known not to be on one (its look-up of path's last
// name would be a request to the server).
func (r *resolver) lstat(path string) (uint16, error) {
	st, err := slowmount.Probe(unix.AT_FDCWD, path)
	if err != nil {
		return 0, err
	}
	mounts := r.mounts
	if mounts == nil {
		mounts = slowmount.HostTable
	}
	if on := mounts.Slow(st.MntID); on != nil {
		return 0, &slowError{on: on}
	}
	return st.Mode, nil
}

// exists says whether the host has path (its symbolic link, if it is one), for a path
// resolved by canonicalOf: one bounded lstat, never on a slow file system. ok is false when
// it cannot tell without a look-up it will not make (a slow file system, the budget spent).
func (r *resolver) exists(res resolution) (exists, ok bool) {
	switch {
	case res.slow != nil || res.spent:
		return false, false
	case res.dirErr != nil:
		return !errors.Is(res.dirErr, unix.ENOENT), true
	case !r.take():
		return false, false
	}
	_, err := r.lstat(res.canon)
	var slow *slowError
	if errors.As(err, &slow) {
		return false, false
	}
	return err == nil || !errors.Is(err, unix.ENOENT), true
}

func (r *resolver) take() bool {
	if r.spent >= resolveBudget {
		return false
	}
	r.spent++
	return true
}

// eval is filepath.EvalSymlinks on an absolute path, following at most maxLinks symlinks,
// each lstat and readlink taken from the budget.
func (r *resolver) eval(path string) (string, error) {
	dest := "/"
	links := 0
	for start, end := 1, 1; start < len(path); start = end {
		for start < len(path) && path[start] == '/' {
			start++
		}
		end = start
		for end < len(path) && path[end] != '/' {
			end++
		}
		name := path[start:end]
		switch name {
		case "", ".":
			continue
		case "..":
			dest = filepath.Dir(dest)
			continue
		}
		next := filepath.Join(dest, name)
		if !r.take() {
			return "", errBudget
		}
		mode, err := r.lstat(next)
		if err != nil {
			return "", err
		}
		switch mode {
		case unix.S_IFLNK:
		case unix.S_IFDIR:
			dest = next
			continue
		default:
			if end < len(path) {
				return "", unix.ENOTDIR
			}
			dest = next
			continue
		}
		if links++; links > maxLinks {
			return "", unix.ELOOP
		}
		if !r.take() {
			return "", errBudget
		}
		link, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(link) {
			dest = "/"
		}
		path, end = link+path[end:], 0
		if filepath.IsAbs(link) {
			end = 1
		}
	}
	return dest, nil
}
