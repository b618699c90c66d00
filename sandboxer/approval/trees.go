package approval

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
)

// Rules protect trees, not names. A path rule's glob names a tree by its literal root (the
// names before the first wildcard: /ws/project/.git for /ws/project/.git/**). The root's
// identity (device and inode) is taken from the call's root at the call's first held
// syscall, before anything of the call can have moved it (every rename is held). Then an
// object is under the rule when its path matches the glob, or when one of its ancestors (or
// itself) is the root by identity and its path below that ancestor, put under the root's
// name, matches: after an approved `mv project p2`, `rm p2/.git/HEAD` is still asked about.

// treeRoot is a path rule's literal root and the identity it had at the call's start.
type treeRoot struct {
	path string
	id   fileID
}

// literalRoot is the names of glob g before its first wildcard.
func literalRoot(g string) string {
	var names []string
	for _, n := range strings.Split(strings.Trim(g, "/"), "/") {
		if strings.ContainsAny(n, "*?[") {
			break
		}
		names = append(names, n)
	}
	return "/" + strings.Join(names, "/")
}

// rootsOnce takes the path rules' roots' identities from the call's root: at the call's first
// held path syscall those that exist, and at every later one those that did not yet (a tree
// the tool makes after its start: mkdir -p project/.git, then mv project p2). A root is
// learned once and kept: what a held rename moves was learned before its decision (this runs
// first), so the tree stays gated under its new name. Its cost is one look-up per rule whose
// root is still missing, per held path syscall.
//
// With mt (a slow file system in the tool's mount table) a root is looked up by the
// supervisor's own walk (slowfs.go): a root on a slow file system is matched by path only.
func (s *Supervisor) rootsOnce(root int, mt *mountTable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roots == nil {
		s.roots = map[*policy.ApprovalRule]treeRoot{}
	} else if s.rootsMissing == 0 {
		return
	}
	missing := 0
	for i := range s.cfg.Rules.Rules {
		r := &s.cfg.Rules.Rules[i]
		if r.Glob == "" {
			continue
		}
		if _, ok := s.roots[r]; ok {
			continue
		}
		p := literalRoot(r.Glob)
		if p == "/" {
			continue // the root itself: by path only
		}
		var st unix.Stat_t
		if statRoot(root, mt, p, &st) != nil {
			missing++ // nothing there yet: by path only, until it is
			continue
		}
		s.roots[r] = treeRoot{path: p, id: statID(&st)}
	}
	s.rootsMissing = missing
}

// statRoot stats absolute path p in the call's root without following a last link; with mt,
// by the supervisor's walk, failing (EREMOTE) on a slow file system.
func statRoot(root int, mt *mountTable, p string, st *unix.Stat_t) error {
	if mt == nil {
		return statInRoot(root, p, true, st)
	}
	l, e, on := resolveOnce(mt, unix.AT_FDCWD, p)
	if on != nil {
		return unix.EREMOTE
	}
	if e != 0 {
		return e
	}
	defer l.close()
	return unix.Fstatat(l.dir, l.name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// ancestry is an object's identity and its ancestors', nearest first, with its path below
// each: what identity matching compares with the rules' roots.
type ancestry []struct {
	id    fileID
	below string // the object's path below this one ("" for the object itself)
}

// maxAncestry bounds the walk up from an object: deeper objects are matched by path only.
const maxAncestry = 128

// ancestors walks up from l's directory to the call's root ('..' stops there: the acting
// thread is chrooted in it).
func ancestors(l loc) ancestry {
	var out ancestry
	if l.name == "." {
		return nil // the directory itself (an op on "." fails): by path only
	}
	var st unix.Stat_t
	if unix.Fstatat(l.dir, l.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		out = append(out, struct {
			id    fileID
			below string
		}{statID(&st), ""})
	}
	names := strings.Split(strings.Trim(l.path, "/"), "/")
	below := l.name
	fd, err := unix.Openat(l.dir, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return out
	}
	var prev fileID
	for depth := 0; depth < maxAncestry; depth++ {
		if l.mt != nil {
			if on, err := l.mt.slowAt(fd, ""); on != nil || err != nil {
				break // above a slow file system's mount: by path only from here
			}
		}
		if unix.Fstat(fd, &st) != nil {
			break
		}
		id := statID(&st)
		if depth > 0 && id == prev {
			break // the root: its '..' is itself
		}
		out = append(out, struct {
			id    fileID
			below string
		}{id, below})
		prev = id
		// The next one up: this directory's name goes below.
		if i := len(names) - 2 - depth; i >= 0 {
			below = names[i] + "/" + below
		} else {
			break
		}
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return out
		}
		fd = up
	}
	unix.Close(fd)
	return out
}

// under says whether the object at l is under rule r: its path matches r's glob (beneath:
// or could match something beneath it, for a directory moved or removed), or it is below
// r's tree's root by identity and its path there matches.
func (s *Supervisor) under(r *policy.ApprovalRule, l *loc, beneath bool) bool {
	match := func(p string) bool {
		return policy.MatchGlob(r.Glob, p) || beneath && policy.MatchGlobBeneath(r.Glob, p)
	}
	if match(l.path) {
		return true
	}
	s.mu.Lock()
	root, ok := s.roots[r]
	s.mu.Unlock()
	if !ok {
		return false
	}
	if l.anc == nil {
		a := ancestors(*l)
		l.anc = &a
	}
	for _, a := range *l.anc {
		if a.id != root.id {
			continue
		}
		p := root.path
		if a.below != "" {
			p = strings.TrimSuffix(root.path, "/") + "/" + a.below
		}
		if match(p) {
			return true
		}
	}
	return false
}
