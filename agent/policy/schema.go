package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/event"
)

func (d *decoder) policy(root *yaml.Node, p *Policy) {
	d.mapping(root, "", fields{
		"apiVersion": func(n *yaml.Node, f string) { d.oneOf(n, f, &p.APIVersion, APIVersion) },
		"kind":       func(n *yaml.Node, f string) { d.oneOf(n, f, &p.Kind, Kind) },
		"metadata": func(n *yaml.Node, f string) {
			d.mapping(n, f, fields{
				"name":        func(n *yaml.Node, f string) { d.name(n, f, &p.Metadata.Name) },
				"description": func(n *yaml.Node, f string) { d.str(n, f, &p.Metadata.Description) },
			}, "name")
		},
		// extends names the parent whose values the fields left out take and whose lists the
		// additive form ({add, remove}) changes: the built-in strict policy (the parent when
		// extends is left out), or another policy file, relative to this one (extends.go
		// reads it before this document is decoded).
		"extends": func(n *yaml.Node, f string) {
			var s string
			d.str(n, f, &s)
			if s == "" && n.Tag == "!!str" {
				d.fail(n, f, "expected strict or a policy file's path, got %s", describe(n))
			}
		},
		"spec": func(n *yaml.Node, f string) { d.spec(n, f, &p.Spec) },
	}, "apiVersion", "kind", "metadata", "spec")
}

func (d *decoder) name(n *yaml.Node, field string, dst *string) {
	var s string
	d.str(n, field, &s)
	if s == "" {
		if n.Tag == "!!str" {
			d.fail(n, field, "expected a name like web-fetch, got %s", describe(n))
		}
		return
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') || len(s) > 63 {
			d.fail(n, field, "expected a name of at most 63 lowercase letters, digits, '-', '.', '_', got %s", describe(n))
			return
		}
	}
	*dst = s
}

// required lists the fields the strict file itself must spell out; user files may omit them.
func (d *decoder) required(names ...string) []string {
	if d.base == nil {
		return names
	}
	return nil
}

func (d *decoder) spec(n *yaml.Node, field string, s *Spec) {
	d.mapping(n, field, fields{
		"mode": func(n *yaml.Node, f string) {
			var m string
			d.oneOf(n, f, &m, string(Enforce), string(Audit))
			s.Mode = Mode(m)
		},
		"isolation": func(n *yaml.Node, f string) {
			d.mapping(n, f, fields{
				"network": func(n *yaml.Node, f string) {
					var m string
					d.oneOf(n, f, &m, string(NetworkNone), string(NetworkHostFiltered))
					s.Isolation.Network = NetworkIsolation(m)
				},
				"capabilities": func(n *yaml.Node, f string) { list(d, n, f, &s.Isolation.Capabilities, d.capability) },
			}, d.required("network", "capabilities")...)
		},
		"resources":  func(n *yaml.Node, f string) { d.resources(n, f, &s.Resources) },
		"filesystem": func(n *yaml.Node, f string) { d.filesystem(n, f, &s.Filesystem) },
		"network": func(n *yaml.Node, f string) {
			d.mapping(n, f, fields{
				"egress":       func(n *yaml.Node, f string) { list(d, n, f, &s.Network.Egress, d.egress) },
				"allowNetlink": func(n *yaml.Node, f string) { d.boolean(n, f, &s.Network.AllowNetlink) },
			}, d.required("egress")...)
		},
		"syscalls": func(n *yaml.Node, f string) { d.syscalls(n, f, &s.Syscalls) },
		"observability": func(n *yaml.Node, f string) {
			d.mapping(n, f, fields{
				"eventBudget": func(n *yaml.Node, f string) { d.count(n, f, &s.Observability.EventBudget) },
			}, d.required("eventBudget")...)
		},
		"credentials": func(n *yaml.Node, f string) { list(d, n, f, &s.Credentials, d.credential) },
		"output":      func(n *yaml.Node, f string) { d.output(n, f, &s.Output) },
		"approvals":   func(n *yaml.Node, f string) { d.approvals(n, f, &s.Approvals) },
	}, d.required("mode", "isolation", "resources", "filesystem", "network", "syscalls", "observability", "output")...)
}

func (d *decoder) resources(n *yaml.Node, field string, r *Resources) {
	d.mapping(n, field, fields{
		"memory":      func(n *yaml.Node, f string) { d.size(n, f, &r.MemoryBytes) },
		"pids":        func(n *yaml.Node, f string) { d.count(n, f, &r.Pids) },
		"cpus":        func(n *yaml.Node, f string) { d.cpus(n, f, &r.MilliCPUs) },
		"wallTime":    func(n *yaml.Node, f string) { d.duration(n, f, &r.WallTime) },
		"outputBytes": func(n *yaml.Node, f string) { d.size(n, f, &r.OutputBytes) },
		"tmpSize":     func(n *yaml.Node, f string) { d.size(n, f, &r.TmpSizeBytes) },
		"tmpInodes":   func(n *yaml.Node, f string) { d.count(n, f, &r.TmpInodes) },
		"disk":        func(n *yaml.Node, f string) { d.size(n, f, &r.DiskBytes) },
		"inodes":      func(n *yaml.Node, f string) { d.count(n, f, &r.Inodes) },
	}, d.required("memory", "pids", "cpus", "wallTime", "outputBytes", "tmpSize", "tmpInodes", "disk", "inodes")...)
}

func (d *decoder) filesystem(n *yaml.Node, field string, fs *Filesystem) {
	d.mapping(n, field, fields{
		"read":              func(n *yaml.Node, f string) { list(d, n, f, &fs.Read, d.path) },
		"write":             func(n *yaml.Node, f string) { list(d, n, f, &fs.Write, d.path) },
		"exec":              func(n *yaml.Node, f string) { list(d, n, f, &fs.Exec, d.path) },
		"deny":              func(n *yaml.Node, f string) { list(d, n, f, &fs.Deny, d.path) },
		"allowSpecialFiles": func(n *yaml.Node, f string) { d.boolean(n, f, &fs.AllowSpecialFiles) },
	}, d.required("read", "write", "exec", "deny", "allowSpecialFiles")...)
}

// path accepts an absolute path or one under a placeholder, already clean: a policy path is
// read by people, so "/usr/../etc" or "${WORKSPACE}/./x" is refused rather than normalised.
func (d *decoder) path(n *yaml.Node, field string) (string, bool) {
	const want = "an absolute path or one starting with ${WORKSPACE} or ${TMP}"
	s, ok := d.scalar(n, field, want, "!!str")
	if !ok {
		return "", false
	}
	rest := s
	for _, ph := range []string{Workspace, Tmp} {
		if s == ph || strings.HasPrefix(s, ph+"/") {
			rest = "/" + strings.TrimPrefix(strings.TrimPrefix(s, ph), "/")
			break
		}
	}
	switch {
	case strings.Contains(rest, "${"):
		d.fail(n, field, "expected %s (placeholders only at the start), got %s", want, describe(n))
	case !strings.HasPrefix(rest, "/"):
		d.fail(n, field, "expected %s, got %s", want, describe(n))
	case path.Clean(rest) != rest || slices.Contains(strings.Split(rest, "/"), ".."):
		d.fail(n, field, "expected a clean path (no '.', '..', '//' or trailing '/'), got %s", describe(n))
	default:
		return s, true
	}
	return "", false
}

// capability refuses every entry: keeping capabilities in the tool is not supported (it runs
// with none, as an unprivileged user), and a policy that lists one must not look applied.
// A name that is not a capability gets the usual "expected" error first.
func (d *decoder) capability(n *yaml.Node, field string) (string, bool) {
	s, ok := d.scalar(n, field, "a capability name like CAP_NET_BIND_SERVICE", "!!str")
	if !ok {
		return "", false
	}
	if !slices.Contains(capabilityNames, s) {
		d.fail(n, field, "expected a capability name like CAP_NET_BIND_SERVICE, got %s", describe(n))
		return "", false
	}
	d.fail(n, field, "%s: keeping capabilities is not supported (the tool runs with none); expected an empty list", s)
	return "", false
}

func (d *decoder) egress(n *yaml.Node, field string) (EgressRule, bool) {
	r := EgressRule{Protocol: TCP}
	before := len(d.errs)
	d.mapping(n, field, fields{
		"cidr":   func(n *yaml.Node, f string) { d.cidr(n, f, &r.CIDR) },
		"domain": func(n *yaml.Node, f string) { d.domain(n, f, &r.Domain) },
		"ports": func(n *yaml.Node, f string) {
			list(d, n, f, &r.Ports, d.portRange)
			if len(r.Ports) == 0 && n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
				d.fail(n, f, "expected at least one port or range (1-65535 for all), got an empty list")
			}
		},
		"protocol": func(n *yaml.Node, f string) {
			var p string
			d.oneOf(n, f, &p, string(TCP), string(UDP))
			r.Protocol = Protocol(p)
		},
		"allowPrivate": func(n *yaml.Node, f string) { d.boolean(n, f, &r.AllowPrivate) },
	}, "ports")
	d.cidrOrDomain(n, field, &r)
	if r.AllowPrivate && r.CIDR.IsValid() {
		d.fail(d.at(join(field, "allowPrivate"), n), join(field, "allowPrivate"),
			"expected only on a domain rule (a cidr rule names its addresses itself), got true")
	}
	return r, len(d.errs) == before
}

func (d *decoder) syscalls(n *yaml.Node, field string, s *Syscalls) {
	// A file that gives either list replaces the strict lists entirely; the additive form of
	// a list ({add, remove}) starts from the parent's.
	deny, allow := slices.Clone(s.Deny), slices.Clone(s.Allow)
	var gaveDeny, gaveAllow, gaveDefault bool
	d.mapping(n, field, fields{
		"deny":  func(n *yaml.Node, f string) { gaveDeny = true; list(d, n, f, &deny, d.syscall) },
		"allow": func(n *yaml.Node, f string) { gaveAllow = true; list(d, n, f, &allow, d.syscall) },
		"defaultAction": func(n *yaml.Node, f string) {
			gaveDefault = true
			var a string
			d.oneOf(n, f, &a, string(ActionErrno), string(ActionKill), string(ActionLog))
			s.DefaultAction = SyscallAction(a)
		},
		"denyNewNamespaces":     func(n *yaml.Node, f string) { d.boolean(n, f, &s.DenyNewNamespaces) },
		"denyTerminalInjection": func(n *yaml.Node, f string) { d.boolean(n, f, &s.DenyTerminalInjection) },
		"denyFileWatch":         func(n *yaml.Node, f string) { d.boolean(n, f, &s.DenyFileWatch) },
		"denyExecutableMemfd":   func(n *yaml.Node, f string) { d.boolean(n, f, &s.DenyExecutableMemfd) },
		"fatal":                 func(n *yaml.Node, f string) { s.Fatal = nil; list(d, n, f, &s.Fatal, d.syscall) },
	}, d.required("deny", "denyNewNamespaces", "denyTerminalInjection", "denyFileWatch", "denyExecutableMemfd")...)
	switch {
	case gaveDeny && gaveAllow:
		d.fail(n, field, "expected either deny or allow, got both")
	case gaveAllow:
		s.Allow, s.Deny = allow, nil
		if !gaveDefault {
			d.fail(n, join(field, "defaultAction"), "required with allow: errno, kill or log")
		}
	case gaveDeny:
		s.Deny, s.Allow = deny, nil
		if gaveDefault {
			d.fail(d.at(join(field, "defaultAction"), n), join(field, "defaultAction"), "only meaningful with allow (a deny list allows everything else)")
		}
	case gaveDefault && len(s.Allow) == 0:
		d.fail(d.at(join(field, "defaultAction"), n), join(field, "defaultAction"), "only meaningful with allow (a deny list allows everything else)")
	}
}

// at is a node carrying the position of a field's value, or fallback when it has none.
func (d *decoder) at(field string, fallback *yaml.Node) *yaml.Node {
	if ps, ok := d.pos[field]; ok {
		return &yaml.Node{Line: ps.line, Column: ps.col}
	}
	return fallback
}

func (d *decoder) syscall(n *yaml.Node, field string) (string, bool) {
	s, ok := d.scalar(n, field, "a syscall name like ptrace", "!!str")
	if !ok {
		return "", false
	}
	if _, err := event.SyscallNumber(s); err != nil {
		d.fail(n, field, "expected an x86-64 syscall name like ptrace, got %s", describe(n))
		return "", false
	}
	return s, true
}

// crossCheck finds what no single field shows: contradictions between sections.
func (d *decoder) crossCheck(root *yaml.Node, p *Policy) {
	at := func(field string) *yaml.Node { return d.at(field, root) }
	if p.Spec.Isolation.Network == NetworkNone && len(p.Spec.Network.Egress) > 0 {
		d.fail(at("spec.network.egress"), "spec.network.egress",
			"egress rules need spec.isolation.network: %s, got %s", NetworkHostFiltered, NetworkNone)
	}
	for _, l := range []struct {
		name string
		v    []string
	}{{"deny", p.Spec.Syscalls.Deny}, {"allow", p.Spec.Syscalls.Allow}} {
		seen := map[string]bool{}
		for i, s := range l.v {
			f := fmt.Sprintf("spec.syscalls.%s[%d]", l.name, i)
			if seen[s] {
				d.fail(at(f), f, "%s listed twice", s)
			}
			seen[s] = true
		}
	}
	d.checkCredentials(p)
}
