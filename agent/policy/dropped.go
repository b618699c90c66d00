package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Dropped names each protection of the built-in strict policy that p does not keep: a list
// given in full replaces strict's (a six-entry deny list drops the rest of strict's denies),
// a switch turned off, a mode or isolation that blocks less. `berm policy check` prints them
// as warnings: a policy may mean to drop them, but never silently.
func (p *Policy) Dropped() []string {
	s := Strict().Spec
	q := p.Spec
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if q.Mode != s.Mode {
		add("spec.mode is %s: nothing is blocked (strict: %s)", q.Mode, s.Mode)
	}
	if q.Isolation.Network != s.Isolation.Network {
		add("spec.isolation.network is %s (strict: %s, a network namespace of the call's own)", q.Isolation.Network, s.Isolation.Network)
	}
	for _, d := range s.Filesystem.Deny {
		if !slices.ContainsFunc(q.Filesystem.Deny, func(x string) bool { return covers(x, d) }) {
			add("spec.filesystem.deny drops strict's %s", d)
		}
	}
	if q.Filesystem.AllowSpecialFiles && !s.Filesystem.AllowSpecialFiles {
		add("spec.filesystem.allowSpecialFiles lets the tool make FIFOs and unix sockets in its writable trees (strict refuses them when made)")
	}
	if len(q.Syscalls.Allow) == 0 {
		for _, d := range s.Syscalls.Deny {
			if !slices.Contains(q.Syscalls.Deny, d) {
				add("spec.syscalls.deny drops strict's %s", d)
			}
		}
	}
	for _, f := range []struct {
		name       string
		strict, on bool
	}{
		{"denyNewNamespaces", s.Syscalls.DenyNewNamespaces, q.Syscalls.DenyNewNamespaces},
		{"denyTerminalInjection", s.Syscalls.DenyTerminalInjection, q.Syscalls.DenyTerminalInjection},
		{"denyFileWatch", s.Syscalls.DenyFileWatch, q.Syscalls.DenyFileWatch},
		{"denyExecutableMemfd", s.Syscalls.DenyExecutableMemfd, q.Syscalls.DenyExecutableMemfd},
	} {
		if f.strict && !f.on {
			add("spec.syscalls.%s is off (strict: on)", f.name)
		}
	}
	if q.Network.AllowNetlink && !s.Network.AllowNetlink {
		add("spec.network.allowNetlink opens netlink sockets (strict: refused)")
	}
	for _, r := range s.Output.Redact {
		if !slices.ContainsFunc(q.Output.Redact, func(x RedactPattern) bool { return x.Name == r.Name }) {
			add("spec.output.redact drops strict's %s", r.Name)
		}
	}
	return out
}

// covers says whether the deny entry x covers strict's d (the same path or an ancestor).
func covers(x, d string) bool {
	x, d = filepath.Clean(x), filepath.Clean(d)
	return x == d || x == "/" || strings.HasPrefix(d, x+"/")
}
