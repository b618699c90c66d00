package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
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
//     rather than its target.
const (
	maxLinks      = 40
	resolveBudget = 1 << 16
)

var errBudget = errors.New("resolve budget spent")

// resolver keeps a call's canonical names and what resolving them may still cost.
type resolver struct {
	paths map[string]string // full path -> canonical
	dirs  map[string]string // directory -> canonical, "" when it does not resolve
	spent int               // reads of the host file system so far
}

// canonical is path with its symlinks resolved, the directory's when the path itself does
// not resolve (a file not there), or path itself.
func (r *resolver) canonical(path string) string {
	// The call's /proc is its own: resolved here, /proc/self/fd/3 would name the agent's own
	// descriptor (a file of the host's), not the tool's.
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return path
	}
	if canon, ok := r.paths[path]; ok {
		return canon
	}
	canon := r.resolve(path)
	if r.paths == nil || len(r.paths) >= maxResolved {
		r.paths = make(map[string]string, 64)
	}
	r.paths[path] = canon
	return canon
}

func (r *resolver) resolve(path string) string {
	if path == "/" {
		return path
	}
	dir, base := filepath.Split(path)
	dir = filepath.Clean(dir)
	cdir, ok := r.dirs[dir]
	if !ok {
		c, err := r.eval(dir)
		if err != nil && !errors.Is(err, errBudget) {
			c = ""
		} else if err != nil {
			return path // spent: not cached, named as given
		}
		if r.dirs == nil || len(r.dirs) >= maxResolved {
			r.dirs = make(map[string]string, 64)
		}
		r.dirs[dir] = c
		cdir = c
	}
	if cdir == "" {
		return path
	}
	joined := filepath.Join(cdir, base)
	if base == "." || base == ".." {
		if c, err := r.eval(joined); err == nil {
			return c
		}
		return joined
	}
	if !r.take() {
		return joined
	}
	var st unix.Stat_t
	if err := unix.Lstat(joined, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return joined
	}
	if c, err := r.eval(joined); err == nil {
		return c
	}
	return joined
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
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return "", err
		}
		switch st.Mode & unix.S_IFMT {
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
