package lsm

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/bpf"
)

// Rights are what a rule grants on an inode and everything beneath it (enum berm_lsm_right).
type Rights uint32

const (
	Read   = Rights(bpf.WireBermLsmRightBERM_LSM_READ)   // open for reading, list a directory
	Write  = Rights(bpf.WireBermLsmRightBERM_LSM_WRITE)  // open for writing, truncate, create entries
	Exec   = Rights(bpf.WireBermLsmRightBERM_LSM_EXEC)   // execute
	Remove = Rights(bpf.WireBermLsmRightBERM_LSM_REMOVE) // unlink, rmdir, rename away
)

func (r Rights) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for _, n := range []struct {
		r    Rights
		name string
	}{{Read, "read"}, {Write, "write"}, {Exec, "exec"}, {Remove, "remove"}} {
		if r&n.r != 0 {
			parts = append(parts, n.name)
			r &^= n.r
		}
	}
	if r != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(r)))
	}
	return strings.Join(parts, "|")
}

// Rule grants Rights on Path (a file or a tree). ID is reported in denials decided by it.
type Rule struct {
	Path   string
	Rights Rights
	ID     uint32
}

// RightsOf maps Landlock filesystem rights to the LSM's coarser ones. Each LSM right stands
// for a group of Landlock rights the policy compiler always grants together (see
// sandboxer/policy compile_fs.go); the LSM right is granted only when the group's
// characteristic Landlock right is, so the mapping never grants more than Landlock would:
// reading needs ReadFile (a directory listing alone is not a read grant), writing WriteFile
// (creating entries comes with it in every write grant), deletion RemoveFile.
func RightsOf(access uint64) Rights {
	var r Rights
	if access&landlock.ReadFile != 0 {
		r |= Read
	}
	if access&landlock.WriteFile != 0 {
		r |= Write
	}
	if access&landlock.Execute != 0 {
		r |= Exec
	}
	if access&landlock.RemoveFile != 0 {
		r |= Remove
	}
	return r
}

// FromLandlock turns a call's Landlock ruleset into LSM rules. Landlock unites the rights of
// every rule on the way down to an object; the kernel side stops at the nearest rule, so each
// rule carries its ancestors' rights. Rule i of rs.Paths gets the id base+i+1: the caller
// numbers them after the policy's other rules (policy.Compiled.Rules), so a denial names the
// filesystem grant that decided it; 0 stays the default deny.
func FromLandlock(rs landlock.Ruleset, base uint32) []Rule {
	var out []Rule
	for i, p := range rs.Paths {
		path := filepath.Clean(p.Path)
		acc := p.Access
		for _, a := range rs.Paths {
			if a.Path != p.Path && within(path, filepath.Clean(a.Path)) {
				acc |= a.Access
			}
		}
		if r := RightsOf(acc); r != 0 {
			out = append(out, Rule{Path: path, Rights: r, ID: base + uint32(i) + 1})
		}
	}
	return out
}

// within says whether path is root or beneath it (both clean and absolute).
func within(path, root string) bool {
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}
