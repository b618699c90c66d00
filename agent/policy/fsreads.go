package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// FSReads is every fact of the file system a compile read: the type of each path it looked
// at (and a symlink's target), the entries of each directory it listed. A compile's result is
// a function of the policy, its CompileEnv and these facts alone, so a launcher may reuse a
// compile for a later call when Unchanged says every fact still holds (sandboxer's compile
// cache). The facts are the inputs themselves, not a proxy for them (an mtime, an inode
// number): nothing a change can leave equal.
//
// One compile reads each path once: a path looked at twice (every grant under /usr walks
// /usr) is answered from the first read, so the compile sees one view of the tree.
type FSReads struct {
	mu    sync.Mutex
	paths map[string]pathFact
	dirs  map[string]string
	// relative: a relative path was resolved, whose facts depend on the working directory.
	relative bool
}

// pathFact is what lstat (and readlink, for a symlink) said of a path.
type pathFact struct {
	mode  uint32     // S_IFMT bits; 0 when lstat failed
	errno unix.Errno // lstat's (or readlink's) failure
	link  string     // a symlink's target
}

func readPathFact(path string) pathFact {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return pathFact{errno: ErrnoOf(err)}
	}
	f := pathFact{mode: st.Mode & unix.S_IFMT}
	if f.mode == unix.S_IFLNK {
		target, err := os.Readlink(path)
		if err != nil {
			return pathFact{mode: f.mode, errno: ErrnoOf(err)}
		}
		f.link = target
	}
	return f
}

func (r *FSReads) lstat(path string) pathFact {
	if !filepath.IsAbs(path) {
		r.mu.Lock()
		r.relative = true
		r.mu.Unlock()
		return readPathFact(path)
	}
	r.mu.Lock()
	f, ok := r.paths[path]
	r.mu.Unlock()
	if ok {
		return f
	}
	f = readPathFact(path)
	r.mu.Lock()
	if r.paths == nil {
		r.paths = map[string]pathFact{}
	}
	r.paths[path] = f
	r.mu.Unlock()
	return f
}

// EvalSymlinks is filepath.EvalSymlinks (its algorithm, its results and errors), with every
// path it looks at recorded.
func (r *FSReads) EvalSymlinks(path string) (string, error) {
	const sep = "/"
	volLen := 0
	if volLen < len(path) && path[volLen] == '/' {
		volLen++
	}
	vol := path[:volLen]
	dest := vol
	linksWalked := 0
	for start, end := volLen, volLen; start < len(path); start = end {
		for start < len(path) && path[start] == '/' {
			start++
		}
		end = start
		for end < len(path) && path[end] != '/' {
			end++
		}
		if end == start {
			break
		} else if path[start:end] == "." {
			continue
		} else if path[start:end] == ".." {
			var i int
			for i = len(dest) - 1; i >= volLen; i-- {
				if dest[i] == '/' {
					break
				}
			}
			if i < volLen || dest[i+1:] == ".." {
				if len(dest) > volLen {
					dest += sep
				}
				dest += ".."
			} else {
				dest = dest[:i]
			}
			continue
		}
		if len(dest) > 0 && dest[len(dest)-1] != '/' {
			dest += sep
		}
		dest += path[start:end]

		f := r.lstat(dest)
		if f.mode == 0 {
			return "", &fs.PathError{Op: "lstat", Path: dest, Err: f.errno}
		}
		if f.mode != unix.S_IFLNK {
			if f.mode != unix.S_IFDIR && end < len(path) {
				return "", unix.ENOTDIR
			}
			continue
		}
		linksWalked++
		if linksWalked > 255 {
			return "", errors.New("EvalSymlinks: too many links")
		}
		if f.errno != 0 {
			return "", &fs.PathError{Op: "readlink", Path: dest, Err: f.errno}
		}
		link := f.link
		path = link + path[end:]
		if len(link) > 0 && link[0] == '/' {
			dest, end, vol, volLen = link[:1], 1, link[:1], 1
		} else {
			var i int
			for i = len(dest) - 1; i >= volLen; i-- {
				if dest[i] == '/' {
					break
				}
			}
			if i < volLen {
				dest = vol
			} else {
				dest = dest[:i]
			}
			end = 0
		}
	}
	return filepath.Clean(dest), nil
}

// Lstat says whether path exists (without following a final symlink) and, if it is a
// symlink, its target.
func (r *FSReads) Lstat(path string) (link string, isLink bool, err error) {
	f := r.lstat(path)
	if f.mode == 0 {
		return "", false, &fs.PathError{Op: "lstat", Path: path, Err: f.errno}
	}
	if f.mode != unix.S_IFLNK {
		return "", false, nil
	}
	if f.errno != 0 {
		return "", true, &fs.PathError{Op: "readlink", Path: path, Err: f.errno}
	}
	return f.link, true, nil
}

// IsDir is os.Stat(path).IsDir(): path, its symlinks followed, is a directory.
func (r *FSReads) IsDir(path string) (bool, error) {
	canon, err := r.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	if canon == "/" {
		return true, nil
	}
	return r.lstat(canon).mode == unix.S_IFDIR, nil
}

// dirEntry is one entry of a listed directory.
type dirEntry struct {
	name    string
	symlink bool
}

// ReadDir lists dir (sorted by name), as os.ReadDir, recording the listing.
func (r *FSReads) ReadDir(dir string) ([]dirEntry, error) {
	if !filepath.IsAbs(dir) {
		r.mu.Lock()
		r.relative = true
		r.mu.Unlock()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]dirEntry, len(entries))
	var b strings.Builder
	for i, e := range entries {
		out[i] = dirEntry{name: e.Name(), symlink: e.Type()&fs.ModeSymlink != 0}
		b.WriteString(e.Name())
		if out[i].symlink {
			b.WriteString("\x00l")
		}
		b.WriteByte('\n')
	}
	r.mu.Lock()
	if r.dirs == nil {
		r.dirs = map[string]string{}
	}
	if _, ok := r.dirs[dir]; !ok {
		r.dirs[dir] = b.String()
	}
	r.mu.Unlock()
	return out, nil
}

func listing(dir string) (string, bool) {
	var tmp FSReads
	if _, err := tmp.ReadDir(dir); err != nil {
		return "", false
	}
	return tmp.dirs[dir], true
}

// Unchanged reads every recorded fact again: true when each still holds (the same compile
// would come out of the file system as it is now). Facts of relative paths depend on the
// working directory: reads that include them are never unchanged.
func (r *FSReads) Unchanged() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.relative {
		return false
	}
	for path, f := range r.paths {
		if readPathFact(path) != f {
			return false
		}
	}
	for dir, list := range r.dirs {
		if now, ok := listing(dir); !ok || now != list {
			return false
		}
	}
	return true
}

// Len is how many facts were recorded.
func (r *FSReads) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.paths) + len(r.dirs)
}
