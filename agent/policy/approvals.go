package policy

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Approvals holds irreversible actions in the kernel until a person decides (spec.approvals).
// A gated syscall stops at a seccomp user notification; the launcher's supervisor asks, and
// performs the approved action itself on the arguments it validated.
type Approvals struct {
	// Timeout is how long a request waits for a person: no answer is a deny.
	Timeout time.Duration
	// RetryWindow is how long after a deny (or a timeout) the call asking again for the same
	// action is denied at once, with an alert, instead of asking a person again: a retry
	// storm. Past it, the action is asked about anew.
	RetryWindow time.Duration
	Rules       []ApprovalRule
}

// Approval actions: what a rule's match names.
const (
	ApproveUnlink  = "unlink"  // unlink, unlinkat (and rmdir through it), rmdir
	ApproveRename  = "rename"  // rename, renameat, renameat2: either name under the glob
	ApproveWrite   = "write"   // open, openat, creat for writing (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC)
	ApproveExec    = "exec"    // execve, execveat of Path with argv matching Argv
	ApproveConnect = "connect" // connect to an address in CIDR on Port
)

// ApprovalActions lists the actions in their stable order.
var ApprovalActions = []string{ApproveUnlink, ApproveRename, ApproveWrite, ApproveExec, ApproveConnect}

// DefaultApprovalTimeout applies when spec.approvals gives none.
const DefaultApprovalTimeout = 60 * time.Second

// DefaultRetryWindow applies when spec.approvals gives no retryWindow: long enough to cover
// a tool's retry loop, short enough that a later, deliberate attempt reaches a person.
const DefaultRetryWindow = 30 * time.Second

// ApprovalRule is one spec.approvals.rules entry.
type ApprovalRule struct {
	Name   string
	Action string // one of ApprovalActions
	// Glob is the path pattern of unlink, rename and write: absolute or under ${WORKSPACE} or
	// ${TMP}; '*' matches within a name, '**' any number of names (dir/** matches dir too).
	Glob string
	// Path and Argv are exec's: the program, and a regular expression its arguments (joined
	// with spaces, argv[0] left out) must match; an empty Argv matches any.
	Path string
	Argv *regexp.Regexp
	// CIDR and Port are connect's (Port 0: any port).
	CIDR netip.Prefix
	Port uint16
	// Count is how many actions one approval covers (default 1: every action its own).
	Count int64
	// Approvers name who may decide: people or groups of the node's approvers file
	// (sandboxer/approval/approvers.go); a decision by anyone else is refused and recorded.
	Approvers []string
}

func (d *decoder) approvals(n *yaml.Node, field string, a *Approvals) {
	a.Timeout = DefaultApprovalTimeout
	a.RetryWindow = DefaultRetryWindow
	d.mapping(n, field, fields{
		"timeout":     func(n *yaml.Node, f string) { d.duration(n, f, &a.Timeout) },
		"retryWindow": func(n *yaml.Node, f string) { d.duration(n, f, &a.RetryWindow) },
		"rules":       func(n *yaml.Node, f string) { list(d, n, f, &a.Rules, d.approvalRule) },
	}, "rules")
	seen := map[string]bool{}
	for i, r := range a.Rules {
		f := fmt.Sprintf("%s.rules[%d].name", field, i)
		if seen[r.Name] {
			d.fail(d.at(f, n), f, "rule name %q used twice", r.Name)
		}
		seen[r.Name] = true
	}
}

func (d *decoder) approvalRule(n *yaml.Node, field string) (ApprovalRule, bool) {
	r := ApprovalRule{Count: 1}
	before := len(d.errs)
	d.mapping(n, field, fields{
		"name":      func(n *yaml.Node, f string) { d.name(n, f, &r.Name) },
		"match":     func(n *yaml.Node, f string) { d.approvalMatch(n, f, &r) },
		"count":     func(n *yaml.Node, f string) { d.count(n, f, &r.Count) },
		"approvers": func(n *yaml.Node, f string) { list(d, n, f, &r.Approvers, d.approver) },
	}, "name", "match")
	return r, len(d.errs) == before
}

func (d *decoder) approver(n *yaml.Node, field string) (string, bool) {
	var s string
	d.name(n, field, &s)
	return s, s != ""
}

// approvalMatch reads {unlink|rename|write: glob}, {exec: path, argv: regex} or
// {connect: cidr:port}: exactly one action.
func (d *decoder) approvalMatch(n *yaml.Node, field string, r *ApprovalRule) {
	glob := func(action string) func(n *yaml.Node, f string) {
		return func(n *yaml.Node, f string) {
			r.Action = action
			if g, ok := d.glob(n, f); ok {
				r.Glob = g
			}
		}
	}
	var argv *yaml.Node
	d.mapping(n, field, fields{
		ApproveUnlink: glob(ApproveUnlink),
		ApproveRename: glob(ApproveRename),
		ApproveWrite:  glob(ApproveWrite),
		ApproveExec: func(n *yaml.Node, f string) {
			r.Action = ApproveExec
			if p, ok := d.path(n, f); ok {
				if strings.HasPrefix(p, "${") {
					d.fail(n, f, "expected an absolute program path like /usr/bin/psql, got %s", describe(n))
					return
				}
				// Held by file identity in the call's root; the kernel's exec hook holds an
				// approved exec to the file and argv approved (sandboxer/approval/exec.go).
				r.Path = path.Clean(p)
			}
		},
		"argv": func(n *yaml.Node, f string) {
			argv = n
			s, ok := d.scalar(n, f, "a regular expression like (?i)drop|delete", "!!str")
			if !ok {
				return
			}
			re, err := regexp.Compile(s)
			if err != nil {
				d.fail(n, f, "expected a regular expression (RE2 syntax), got %s: %v", describe(n), err)
				return
			}
			r.Argv = re
		},
		ApproveConnect: func(n *yaml.Node, f string) { r.Action = ApproveConnect; d.cidrPort(n, f, r) },
	})
	actions := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k != "argv" {
			actions++
		}
	}
	switch {
	case n.Kind != yaml.MappingNode:
	case actions != 1:
		d.fail(n, field, "expected exactly one of %s, got %d", strings.Join(ApprovalActions, ", "), actions)
	case argv != nil && r.Action != ApproveExec:
		d.fail(argv, join(field, "argv"), "argv narrows exec only, got it with %s", r.Action)
	}
}

// glob reads a path pattern: a policy path whose names may hold '*', '?' and '[...]', and
// '**' as a whole name.
func (d *decoder) glob(n *yaml.Node, field string) (string, bool) {
	s, ok := d.path(n, field)
	if !ok {
		return "", false
	}
	for _, part := range strings.Split(s, "/") {
		if part == "**" || part == "" {
			continue
		}
		if strings.Contains(part, "**") {
			d.fail(n, field, "expected '**' as a whole name (dir/**), got %s", describe(n))
			return "", false
		}
		if _, err := path.Match(part, ""); err != nil {
			d.fail(n, field, "expected a glob like ${WORKSPACE}/reports/**, got %s: %v", describe(n), err)
			return "", false
		}
	}
	return s, true
}

// cidrPort reads "10.20.0.0/16:443", "[2001:db8::/32]:443" or a CIDR alone (any port).
func (d *decoder) cidrPort(n *yaml.Node, field string, r *ApprovalRule) {
	const want = "a CIDR and port like 10.20.0.0/16:443"
	s, ok := d.scalar(n, field, want, "!!str")
	if !ok {
		return
	}
	c, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			d.fail(n, field, "expected %s, got %s", want, describe(n))
			return
		}
		c, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
	} else if i := strings.LastIndex(s, ":"); i >= 0 && strings.Count(s, ":") == 1 {
		c, port = s[:i], s[i+1:]
	}
	node := *n
	node.Value = c
	d.cidr(&node, field, &r.CIDR)
	if port != "" {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			d.fail(n, field, "expected %s (port 1-65535), got %s", want, describe(n))
			return
		}
		r.Port = uint16(p)
	}
}

// MatchGlob says whether clean absolute path p matches pattern g (placeholders replaced).
func MatchGlob(g, p string) bool {
	return matchNames(strings.Split(strings.Trim(g, "/"), "/"), strings.Split(strings.Trim(p, "/"), "/"))
}

// MatchGlobBeneath says whether some path strictly beneath directory p could match pattern
// g: p is an ancestor of what g protects, and moving or removing p moves or removes it.
func MatchGlobBeneath(g, p string) bool {
	gs := strings.Split(strings.Trim(g, "/"), "/")
	if strings.Trim(p, "/") == "" {
		return true // the root is everything's ancestor
	}
	ps := strings.Split(strings.Trim(p, "/"), "/")
	for ; len(ps) > 0; gs, ps = gs[1:], ps[1:] {
		if len(gs) == 0 {
			return false
		}
		if gs[0] == "**" {
			return true // it takes the rest of p, and a name beneath
		}
		if ok, _ := path.Match(gs[0], ps[0]); !ok {
			return false
		}
	}
	return len(gs) > 0
}

func matchNames(g, p []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			rest := g[1:]
			for i := 0; i <= len(p); i++ {
				if matchNames(rest, p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], p[0]); !ok {
			return false
		}
		g, p = g[1:], p[1:]
	}
	return len(p) == 0
}
