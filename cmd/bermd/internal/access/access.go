// Package access is who may do what with bermd, by tenant: start calls (run), read their
// trail (read), decide their approvals (decide), and which policies a tenant's callers may
// name. The file is bermd --access; without one only root is served, as before.
//
// Decisions take the peer as the kernel gave it (SO_PEERCRED's uid) and the groups bermd read
// for that uid from the user database, never anything the client said. Root keeps every right.
package access

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/policy/yamlerr"
)

// Right is one thing a tenant's file grants.
type Right string

const (
	Run    Right = "run"
	Read   Right = "read"
	Decide Right = "decide"
)

// Strict names the built-in strict policy in a tenant's policies (a request's empty policy).
const Strict = "strict"

// Peer is a caller as bermd knows it: the uid from the kernel and the groups of that uid.
type Peer struct {
	UID  uint32
	GIDs []uint32
}

// Root is the uid that keeps every right.
func (p Peer) Root() bool { return p.UID == 0 }

// principals are the users and groups a right is granted to.
type principals struct {
	uids []uint32
	gids []uint32
}

func (ps principals) has(p Peer) bool {
	if slices.Contains(ps.uids, p.UID) {
		return true
	}
	for _, g := range p.GIDs {
		if slices.Contains(ps.gids, g) {
			return true
		}
	}
	return false
}

// Tenant is one tenant's grants.
type Tenant struct {
	Name   string
	rights map[Right]principals
	// Policies are what its callers may name: Strict, or absolute paths (cleaned).
	Policies []string
}

// File is a loaded access file.
type File struct {
	Path    string
	Tenants []*Tenant
	// UIDs and GIDs are every user and group the file names: the socket is reachable by them.
	UIDs, GIDs []uint32
}

// RootOnly is the access without a file: root only.
var RootOnly = &File{}

func (f *File) tenant(name string) *Tenant {
	for _, t := range f.Tenants {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Refusal is a decision against the peer: the tenant and the right it lacks.
type Refusal struct {
	UID    uint32
	Tenant string
	Right  Right
	Detail string
}

func (r *Refusal) Error() string {
	if r.Detail != "" {
		return fmt.Sprintf("access: uid %d may not %s in tenant %q: %s", r.UID, r.Right, r.Tenant, r.Detail)
	}
	return fmt.Sprintf("access: uid %d has no %q right in tenant %q", r.UID, r.Right, r.Tenant)
}

// Check decides whether the peer has the right in the tenant.
func (f *File) Check(p Peer, tenant string, right Right) error {
	if p.Root() {
		return nil
	}
	t := f.tenant(tenant)
	if t == nil || !t.rights[right].has(p) {
		return &Refusal{UID: p.UID, Tenant: tenant, Right: right}
	}
	return nil
}

// Tenants are the tenants in which the peer has the right (for root: nil, meaning all).
func (f *File) TenantsWith(p Peer, right Right) []string {
	var out []string
	for _, t := range f.Tenants {
		if t.rights[right].has(p) {
			out = append(out, t.Name)
		}
	}
	return out
}

// Known says whether the peer is named anywhere in the file (or is root): the rest are
// refused before anything they send is read.
func (f *File) Known(p Peer) bool {
	if p.Root() {
		return true
	}
	if slices.Contains(f.UIDs, p.UID) {
		return true
	}
	for _, g := range p.GIDs {
		if slices.Contains(f.GIDs, g) {
			return true
		}
	}
	return false
}

// RunTenant is the tenant a run request is for: the one named, or when none is, the only one
// the peer may run in (root: "default").
func (f *File) RunTenant(p Peer, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	if p.Root() {
		return "default", nil
	}
	ts := f.TenantsWith(p, Run)
	switch len(ts) {
	case 1:
		return ts[0], nil
	case 0:
		return "", &Refusal{UID: p.UID, Right: Run, Detail: "no tenant grants it run"}
	}
	return "", fmt.Errorf("access: uid %d may run in tenants %s: name one with --tenant", p.UID, strings.Join(ts, ", "))
}

// Run decides a run request: the peer must have run in the tenant, and name one of the
// tenant's policies (policyFile "" is the built-in strict policy).
func (f *File) Run(p Peer, tenant, policyFile string) error {
	if err := f.Check(p, tenant, Run); err != nil {
		return err
	}
	if p.Root() {
		return nil
	}
	t := f.tenant(tenant)
	want := Strict
	if policyFile != "" {
		want = filepath.Clean(policyFile)
	}
	if !slices.Contains(t.Policies, want) {
		return &Refusal{UID: p.UID, Tenant: tenant, Right: Run, Detail: fmt.Sprintf("policy %s is not one of the tenant's (%s)", want, strings.Join(t.Policies, ", "))}
	}
	return nil
}

// PeerOf is the peer with uid, its groups read from the user database: the primary group and
// every group listing the user. An unknown uid has no groups.
func PeerOf(uid uint32) Peer {
	p := Peer{UID: uid}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return p
	}
	ids, err := u.GroupIds()
	if err != nil {
		ids = []string{u.Gid}
	}
	for _, s := range ids {
		if g, err := strconv.ParseUint(s, 10, 32); err == nil && !slices.Contains(p.GIDs, uint32(g)) {
			p.GIDs = append(p.GIDs, uint32(g))
		}
	}
	return p
}

// Load reads and checks an access file. Every problem is file:line:col.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access file: %w", err)
	}
	return Parse(path, data)
}

// Parse reads an access file's bytes (path is for the errors).
func Parse(path string, data []byte) (*File, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		pos, msg := yamlerr.Syntax(path, data, err)
		return nil, errors.New(yamlerr.Format(pos, "", "invalid yaml: "+msg))
	}
	ps := &parser{file: path}
	f := ps.file_(&doc)
	if len(ps.errs) > 0 {
		return nil, errors.New(strings.Join(ps.errs, "\n"))
	}
	return f, nil
}

type parser struct {
	file string
	errs []string
}

func (ps *parser) errf(n *yaml.Node, in, format string, args ...any) {
	ps.errs = append(ps.errs, yamlerr.Format(yamlerr.At(ps.file, n), in, fmt.Sprintf(format, args...)))
}

// fields walks a mapping, refusing keys not in allowed; it returns key -> (key node, value).
func (ps *parser) fields(n *yaml.Node, in string, allowed ...string) map[string][2]*yaml.Node {
	out := map[string][2]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		ps.errf(n, in, "expected a mapping")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(allowed, k.Value) {
			ps.errf(k, in, "unknown field %q (expected one of %s)", k.Value, strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			ps.errf(k, in, "field %q given twice", k.Value)
			continue
		}
		out[k.Value] = [2]*yaml.Node{k, v}
	}
	return out
}

func (ps *parser) str(n *yaml.Node, in string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		ps.errf(n, in, "expected a string")
		return "", false
	}
	return n.Value, true
}

func (ps *parser) file_(doc *yaml.Node) *File {
	f := &File{Path: ps.file}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		ps.errf(nil, "", "empty access file")
		return f
	}
	top := ps.fields(doc.Content[0], "", "apiVersion", "kind", "spec")
	for _, want := range [][2]string{{"apiVersion", "berm.dev/v1alpha1"}, {"kind", "Access"}} {
		kv, ok := top[want[0]]
		if !ok {
			ps.errf(doc.Content[0], "", "missing %s (expected %s)", want[0], want[1])
			continue
		}
		if v, ok := ps.str(kv[1], want[0]); ok && v != want[1] {
			ps.errf(kv[1], want[0], "expected %s, got %q", want[1], v)
		}
	}
	spec, ok := top["spec"]
	if !ok {
		ps.errf(doc.Content[0], "", "missing spec")
		return f
	}
	sf := ps.fields(spec[1], "spec", "tenants")
	tn, ok := sf["tenants"]
	if !ok {
		ps.errf(spec[1], "spec", "missing tenants")
		return f
	}
	if tn[1].Kind != yaml.SequenceNode {
		ps.errf(tn[1], "spec.tenants", "expected a list of tenants")
		return f
	}
	uids, gids := map[uint32]bool{}, map[uint32]bool{}
	for i, tnode := range tn[1].Content {
		in := fmt.Sprintf("spec.tenants[%d]", i)
		tf := ps.fields(tnode, in, "name", "run", "read", "decide", "policies")
		t := &Tenant{rights: map[Right]principals{}}
		if kv, ok := tf["name"]; !ok {
			ps.errf(tnode, in, "missing name")
		} else if name, ok := ps.str(kv[1], in+".name"); ok {
			if !validTenant(name) {
				ps.errf(kv[1], in+".name", "expected a tenant name of letters, digits, '.', '_' and '-', got %q", name)
			} else if f.tenant(name) != nil {
				ps.errf(kv[1], in+".name", "tenant %q given twice", name)
			}
			t.Name = name
			in = fmt.Sprintf("tenant %s", name)
		}
		for _, r := range []Right{Run, Read, Decide} {
			kv, ok := tf[string(r)]
			if !ok {
				continue
			}
			t.rights[r] = ps.principals(kv[1], in+"."+string(r), uids, gids)
		}
		t.Policies = []string{Strict}
		if kv, ok := tf["policies"]; ok {
			t.Policies = ps.policies(kv[1], in+".policies")
		}
		f.Tenants = append(f.Tenants, t)
	}
	for u := range uids {
		f.UIDs = append(f.UIDs, u)
	}
	for g := range gids {
		f.GIDs = append(f.GIDs, g)
	}
	sort.Slice(f.UIDs, func(i, j int) bool { return f.UIDs[i] < f.UIDs[j] })
	sort.Slice(f.GIDs, func(i, j int) bool { return f.GIDs[i] < f.GIDs[j] })
	return f
}

func (ps *parser) list(n *yaml.Node, in string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		ps.errf(n, in, "expected a list")
		return nil
	}
	return n.Content
}

func (ps *parser) principals(n *yaml.Node, in string, uids, gids map[uint32]bool) principals {
	var out principals
	for _, e := range ps.list(n, in) {
		s, ok := ps.str(e, in)
		if !ok {
			continue
		}
		kind, name, _ := strings.Cut(s, ":")
		switch kind {
		case "user":
			u, err := user.Lookup(name)
			if err != nil || name == "" {
				ps.errf(e, in, "unknown user %q", name)
				continue
			}
			id, _ := strconv.ParseUint(u.Uid, 10, 32)
			out.uids = append(out.uids, uint32(id))
			uids[uint32(id)] = true
		case "group":
			g, err := user.LookupGroup(name)
			if err != nil || name == "" {
				ps.errf(e, in, "unknown group %q", name)
				continue
			}
			id, _ := strconv.ParseUint(g.Gid, 10, 32)
			out.gids = append(out.gids, uint32(id))
			gids[uint32(id)] = true
		default:
			ps.errf(e, in, "expected user:NAME or group:NAME, got %q", s)
		}
	}
	return out
}

func (ps *parser) policies(n *yaml.Node, in string) []string {
	var out []string
	for _, e := range ps.list(n, in) {
		s, ok := ps.str(e, in)
		if !ok {
			continue
		}
		switch {
		case s == Strict:
		case filepath.IsAbs(s):
			s = filepath.Clean(s)
		default:
			ps.errf(e, in, "expected strict or an absolute policy file path, got %q", s)
			continue
		}
		out = append(out, s)
	}
	return out
}

func validTenant(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
