package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/bermsec/berm/agent/policy/landlock"
)

// Landlock rights each kind of grant gives (before masking to the ABI). Write includes read
// (a tree one may write but not read back is not a use case) and refer, so files can move
// within and between writable trees; Landlock still refuses any move that would widen rights.
// Write makes no special file: FIFOs and unix sockets bound to a path are refused when they
// are made (Landlock's make_fifo and make_sock), unless spec.filesystem.allowSpecialFiles adds
// specialAccess; device nodes (make_char, make_block) are never granted. Nothing is left for
// a walk of the workspace after the call to find.
const (
	readAccess  = landlock.ReadFile | landlock.ReadDir
	execAccess  = landlock.Execute | landlock.ReadFile | landlock.ReadDir
	writeAccess = readAccess | landlock.WriteFile | landlock.RemoveDir | landlock.RemoveFile |
		landlock.MakeDir | landlock.MakeReg | landlock.MakeSym | landlock.Refer | landlock.Truncate
	specialAccess = landlock.MakeSock | landlock.MakeFifo
)

// grant is a canonical path and its rights, with where it came from.
type grant struct {
	path   string
	access uint64
	field  string
	placed bool // under a placeholder (the call's own tree)
}

// compileFilesystem resolves every path of the policy to a canonical one and builds the
// Landlock ruleset:
//   - ${WORKSPACE} and ${TMP} are replaced by the canonical env paths, and a path under them
//     must still be under them after resolving symlinks;
//   - a write grant outside the placeholders must not go through a symlink: a writable tree is
//     named by its real path;
//   - no mount point may sit strictly inside a writable or placeholder tree (a bind mount
//     there would lend the tree's rights to whatever it shows);
//   - deny entries are carved out: a grant on an ancestor of a denied path is replaced by
//     grants on everything beside the path down to it (Landlock only adds rights), a grant on
//     the denied path itself is dropped, and a grant strictly inside it stays.
//
// Hard links: the sandbox cannot make new ones out of the trees it may only read (refer is
// never granted there, and a link cannot cross the workspace's mount), so only links that
// exist before the call matter. Those need no walk of the workspace per launch: the tool runs
// as host ids of its own, and the workspace's idmapped mount maps its owner's files to them
// and everyone else's to ids the tool is not (sandboxer idmapSwap), so a link to another user's file grants only what that file
// grants anyone (fs.protected_hardlinks stops unprivileged users from linking what they could
// not read and write themselves).
func (p *Policy) compileFilesystem(c *Compiled, env CompileEnv) Errors {
	abi := env.LandlockABI
	if abi <= 0 || abi > landlock.MaxABI {
		abi = landlock.MaxABI
	}
	c.LandlockABI = abi
	all := landlock.FSRights(abi)
	c.Landlock = landlock.Ruleset{HandledFS: all, Scoped: landlock.Scopes(abi)}

	var errs Errors
	roots := map[string]string{}
	reads := env.Reads
	if reads == nil {
		reads = &FSReads{}
	}
	for _, r := range []struct{ ph, path string }{{Workspace, env.Workspace}, {Tmp, env.Tmp}} {
		canon, err := canonicalDir(reads, r.path)
		if err != nil {
			errs = append(errs, &Error{File: p.File, Field: r.ph, Msg: err.Error()})
			continue
		}
		roots[r.ph] = canon
		c.placeholders = append(c.placeholders, [2]string{canon, r.ph})
	}
	if len(errs) > 0 {
		return errs
	}
	mountinfo := env.MountInfo
	if mountinfo == "" {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return Errors{{File: p.File, Field: "spec.filesystem", Msg: fmt.Sprintf("read mount table: %v", err)}}
		}
		mountinfo = string(b)
	}
	mounts := parseMountPoints(mountinfo)

	resolve := func(field, s string) (string, bool) {
		canon, _, err := p.canonical(reads, s, roots)
		if errors.Is(err, fs.ErrNotExist) {
			c.Skipped = append(c.Skipped, fmt.Sprintf("%s: %s does not exist", field, s))
			return "", false
		}
		if err != nil {
			errs = append(errs, p.fail(field, "%v", err))
			return "", false
		}
		return canon, true
	}

	var grants []grant
	fsp := p.Spec.Filesystem
	write := uint64(writeAccess)
	if fsp.AllowSpecialFiles {
		write |= specialAccess
	}
	for _, k := range []struct {
		name   string
		paths  []string
		access uint64
	}{{"read", fsp.Read, readAccess}, {"write", fsp.Write, write}, {"exec", fsp.Exec, execAccess}} {
		for i, s := range k.paths {
			field := fmt.Sprintf("spec.filesystem.%s[%d]", k.name, i)
			canon, ok := resolve(field, s)
			if !ok {
				continue
			}
			placed := strings.HasPrefix(s, "${")
			if k.name == "write" && !placed && canon != s {
				errs = append(errs, p.fail(field, "writable path %s resolves to %s through a symlink: name the real path", s, canon))
				continue
			}
			if k.name == "write" || placed {
				for _, m := range mounts {
					if m != canon && within(m, canon) {
						errs = append(errs, p.fail(field, "mount point %s inside %s would lend it this grant", m, canon))
					}
				}
			}
			grants = append(grants, grant{path: canon, access: k.access & all, field: field, placed: placed})
		}
	}
	set := map[string]uint64{}
	for _, g := range grants {
		set[g.path] |= g.access
	}
	for i, s := range fsp.Deny {
		field := fmt.Sprintf("spec.filesystem.deny[%d]", i)
		canon, _, err := p.canonical(reads, s, roots)
		if errors.Is(err, fs.ErrNotExist) {
			// the path may appear later; under a writable tree nothing would keep it denied
			if g, ok := coveringWrite(grants, filepath.Clean(p.substitute(s, roots))); ok {
				errs = append(errs, p.fail(field, "%s does not exist inside writable %s: Landlock can only deny what exists", s, g.path))
			} else {
				c.Skipped = append(c.Skipped, fmt.Sprintf("%s: %s does not exist", field, s))
			}
			continue
		}
		if err != nil {
			errs = append(errs, p.fail(field, "%v", err))
			continue
		}
		if err := carve(reads, set, canon); err != nil {
			errs = append(errs, p.fail(field, "%v", err))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for path, acc := range set {
		dir, err := reads.IsDir(path)
		if errors.Is(err, fs.ErrNotExist) {
			// removed since it was listed (a carve lists whole directories such as /etc, which
			// the host changes when it likes): no rule, which grants less, never more
			c.Skipped = append(c.Skipped, fmt.Sprintf("spec.filesystem: %s was removed while the policy compiled", path))
			continue
		}
		if err != nil {
			errs = append(errs, &Error{File: p.File, Field: "spec.filesystem", Msg: fmt.Sprintf("stat %s: %v", path, err)})
			continue
		}
		if !dir {
			acc &= landlock.FileRights
		}
		if acc != 0 {
			c.Landlock.Paths = append(c.Landlock.Paths, landlock.PathRule{Path: path, Access: acc})
		}
	}
	slices.SortFunc(c.Landlock.Paths, func(a, b landlock.PathRule) int { return strings.Compare(a.Path, b.Path) })
	c.Landlock.Paths = prune(c.Landlock.Paths)
	slices.Sort(c.Skipped)
	return errs
}

// prune drops rules that add nothing to what their ancestors grant (Landlock unions the rights
// of every rule on the way down). rules are sorted by path, so ancestors come first.
func prune(rules []landlock.PathRule) []landlock.PathRule {
	var out []landlock.PathRule
	for _, r := range rules {
		var inherited uint64
		for _, a := range out {
			if within(r.Path, a.Path) {
				inherited |= a.Access
			}
		}
		if r.Access&^inherited != 0 {
			out = append(out, r)
		}
	}
	return out
}

func canonicalDir(reads *FSReads, path string) (string, error) {
	if path == "" || !filepath.IsAbs(path) {
		return "", fmt.Errorf("expected an absolute directory from the launcher, got %q", path)
	}
	canon, err := reads.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	dir, err := reads.IsDir(canon)
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", canon, err)
	}
	if !dir {
		return "", fmt.Errorf("%s is not a directory", path)
	}
	return canon, nil
}

func (p *Policy) substitute(s string, roots map[string]string) string {
	for ph, root := range roots {
		if s == ph || strings.HasPrefix(s, ph+"/") {
			return root + strings.TrimPrefix(s, ph)
		}
	}
	return s
}

// canonical resolves a policy path. Under a placeholder it must stay under the placeholder's
// root after resolving symlinks.
func (p *Policy) canonical(reads *FSReads, s string, roots map[string]string) (string, bool, error) {
	full := p.substitute(s, roots)
	canon, err := reads.EvalSymlinks(full)
	if err != nil {
		return "", false, err
	}
	for ph, root := range roots {
		if s == ph || strings.HasPrefix(s, ph+"/") {
			if !within(canon, root) {
				return "", true, fmt.Errorf("%s resolves to %s, outside %s, through a symlink", s, canon, ph)
			}
			return canon, true, nil
		}
	}
	return canon, false, nil
}

// within says whether path is root or beneath it (both clean and absolute).
func within(path, root string) bool {
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}

func coveringWrite(grants []grant, path string) (grant, bool) {
	for _, g := range grants {
		if g.access&landlock.WriteFile != 0 && within(path, g.path) {
			return g, true
		}
	}
	return grant{}, false
}

// carve removes deny from the grant set; see compileFilesystem.
func carve(reads *FSReads, set map[string]uint64, deny string) error {
	for _, g := range slices.Sorted(maps.Keys(set)) {
		acc := set[g]
		switch {
		case g == deny:
			delete(set, g)
		case within(deny, g):
			delete(set, g)
			if err := split(reads, set, g, deny, acc); err != nil {
				return err
			}
		}
	}
	return nil
}

// split grants acc on every entry of dir except the one leading to deny, descending to it.
// Symlinks are left out: access through one is checked where it lands.
func split(reads *FSReads, set map[string]uint64, dir, deny string, acc uint64) error {
	entries, err := reads.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("carve %s out of %s: %w", deny, dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.name)
		switch {
		case p == deny:
		case within(deny, p):
			if err := split(reads, set, p, deny, acc); err != nil {
				return err
			}
		case e.symlink:
		default:
			set[p] |= acc
		}
	}
	return nil
}

// parseMountPoints returns the mount points (field 5) of a mountinfo text, unescaped.
func parseMountPoints(mountinfo string) []string {
	var out []string
	for line := range strings.SplitSeq(mountinfo, "\n") {
		if m, ok := MountPointOf(line); ok {
			out = append(out, m)
		}
	}
	return out
}

// MountPointOf returns the mount point (field 5) of one mountinfo line, unescaped.
func MountPointOf(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return "", false
	}
	return unescapeMount(f[4]), true
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FSAccess is the union of rights the Landlock ruleset grants on path (canonical), for
// checking traced opens in Audit mode: a right in HandledFS missing here would be denied.
func (c *Compiled) FSAccess(path string) uint64 {
	var acc uint64
	for _, r := range c.Landlock.Paths {
		if within(path, r.Path) {
			acc |= r.Access
		}
	}
	return acc
}
