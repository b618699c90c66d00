package sandboxer

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// grantedDevices are the /dev entries a policy may name.
var grantedDevices = map[string]bool{"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true, "/dev/urandom": true, "/dev/tty": true}

// planRoot derives the call's root from the policy's grants (before canonicalisation, so that
// /bin → usr/bin stays a symlink) and the compiled Landlock ruleset's write rights.
// Its reads of the file system go through reads, and its mount table is mounts (the host's
// text): the compile cache reuses the plan while both are what they were.
func planRoot(p *policy.Policy, c *policy.Compiled, workspace string, reads *policy.FSReads, mounts string) sandboxinit.RootPlan {
	var plan sandboxinit.RootPlan
	seen := map[string]bool{}
	fs := p.Spec.Filesystem
	var all []string
	all = append(all, fs.Read...)
	all = append(all, fs.Write...)
	all = append(all, fs.Exec...)
	for _, g := range all {
		if strings.HasPrefix(g, "${") {
			continue // the workspace and /tmp are the init's own mounts
		}
		g = filepath.Clean(g)
		switch {
		case g == "/proc" || strings.HasPrefix(g, "/proc/"):
			continue // a fresh procfs of the call's pid namespace
		case strings.HasPrefix(g, "/dev/"):
			if grantedDevices[g] && !seen[g] {
				plan.Devices = append(plan.Devices, g)
				seen[g] = true
			}
			continue
		case g == "/" || g == "/dev" || g == "/tmp" || seen[g]:
			continue
		}
		seen[g] = true
		b := sandboxinit.Bind{Path: g}
		if link, isLink, err := reads.Lstat(g); err != nil && !isLink {
			continue // the compiler reported it as skipped
		} else if isLink {
			b.Link = link
		}
		if b.Link == "" {
			canon, err := reads.EvalSymlinks(g)
			if err == nil && c.FSAccess(canon)&writeRights != 0 {
				b.Writable = true
			}
		}
		plan.Binds = append(plan.Binds, b)
	}
	// A symlink's target must be in the root too for the link to work; it is, when granted.
	sort.Slice(plan.Binds, func(i, j int) bool { return plan.Binds[i].Path < plan.Binds[j].Path })
	plan.Masked = mountsUnder(mounts, workspace)
	return plan
}

const writeRights = landlock.WriteFile | landlock.MakeReg | landlock.MakeDir | landlock.RemoveFile | landlock.RemoveDir

// mountsUnder lists the mount points of the table data strictly inside dir.
func mountsUnder(data, dir string) []string {
	var out []string
	for _, line := range strings.Split(data, "\n") {
		if m, ok := policy.MountPointOf(line); ok && strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// sandboxMountInfo is the mount table the call will see: the host's minus the workspace's
// sub-mounts (masked, and empty) and minus whatever the host mounted under /tmp (the call
// gets a fresh one). The policy is compiled against it.
func sandboxMountInfo(workspace string) string {
	data, err := hostMounts.current()
	if err != nil {
		return "" // the compiler reads the table itself
	}
	return sandboxMounts(data, workspace)
}

// sandboxMounts is sandboxMountInfo of the host's table data.
func sandboxMounts(data, workspace string) string {
	var keep []string
	for _, line := range strings.Split(data, "\n") {
		if m, ok := policy.MountPointOf(line); ok && (strings.HasPrefix(m, workspace+"/") || strings.HasPrefix(m, "/tmp/")) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}
