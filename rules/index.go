package rules

import (
	"sort"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/bermsec/berm/agent/event"
)

// The index: an event is evaluated only against the rules that can match it. Beyond its kind,
// three kinds have a key read from the event, and a rule whose condition constrains that key at
// the top (== a literal, in a list, && and || of those; for paths also startsWith a literal
// that names a whole first directory) is only in the buckets of the keys it allows:
//
//	syscall: syscall.name
//	exec:    exec.exe_name, the kernel's name of the executed file (not argv[0]: a symlink or
//	         an fd path does not change it)
//	open:    the first component of file.path ("/etc" for /etc/cron.d/x)
//
// So a rule that cannot match an event costs that event nothing, however many there are.

// indexedField is the key of one indexed kind, in a condition and in an event.
type indexedField struct {
	kind    event.Kind
	operand string // the CEL variable
	field   string // its member
	path    bool   // a path: keyed by its first component; startsWith constrains it
}

var indexedFields = []indexedField{
	{kind: event.KindSyscall, operand: "syscall", field: "name"},
	{kind: event.KindExec, operand: "exec", field: "exe_name"},
	{kind: event.KindOpen, operand: "file", field: "path", path: true},
}

// eventKey is the index key of ev for its kind's field.
func eventKey(ev *event.Event) string {
	switch ev.Kind {
	case event.KindSyscall:
		if ev.Syscall != nil {
			return ev.Syscall.Name
		}
	case event.KindExec:
		if ev.Exec != nil {
			return ev.Exec.ExeName
		}
	case event.KindOpen:
		if ev.Open != nil {
			return topDir(ev.Open.Path)
		}
	}
	return ""
}

// topDir is a path's first component with its slash: "/etc" for "/etc/x" and for "/etc",
// "a" for "a/b".
func topDir(p string) string {
	if i := strings.IndexByte(p[min(1, len(p)):], '/'); i >= 0 {
		return p[:i+min(1, len(p))]
	}
	return p
}

// prefixDir is the first component every path with this prefix has, if the prefix names it
// whole ("/etc/" or "/etc/cron" do; "/et" and "/etc" do not: "/etcetera" starts with both).
func prefixDir(prefix string) (string, bool) {
	if len(prefix) < 2 || prefix[0] != '/' {
		return "", false
	}
	i := strings.IndexByte(prefix[1:], '/')
	if i < 0 {
		return "", false
	}
	return prefix[:i+1], true
}

// index is one kind's buckets by key; other holds the rules for keys no rule names.
type index struct {
	by    map[string]*bucket
	other *bucket
}

// keys finds which key values can satisfy e for field f: constrained is false when any can.
func (c *compiler) keys(f indexedField, e ast.Expr) (vals []string, constrained bool) {
	if e.Kind() != ast.CallKind {
		return nil, false
	}
	call := e.AsCall()
	args := call.Args()
	isField := func(x ast.Expr) bool {
		if x.Kind() != ast.SelectKind {
			return false
		}
		s := x.AsSelect()
		return s.FieldName() == f.field && !s.IsTestOnly() && s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == f.operand
	}
	// key maps a literal the field is equal to onto its key.
	key := func(s string) string {
		if f.path {
			return topDir(s)
		}
		return s
	}
	strList := func(l ast.Expr) ([]string, bool) {
		switch l.Kind() {
		case ast.IdentKind:
			if ls := c.lists[l.AsIdent()]; ls != nil && !ls.isInt {
				return ls.strs, true
			}
		case ast.ListKind:
			var out []string
			for _, el := range l.AsList().Elements() {
				if el.Kind() != ast.LiteralKind {
					return nil, false
				}
				s, ok := el.AsLiteral().(types.String)
				if !ok {
					return nil, false
				}
				out = append(out, string(s))
			}
			return out, true
		}
		return nil, false
	}
	switch call.FunctionName() {
	case "_&&_":
		a, ac := c.keys(f, args[0])
		b, bc := c.keys(f, args[1])
		switch {
		case ac && bc:
			return intersect(a, b), true
		case ac:
			return a, true
		case bc:
			return b, true
		}
		return nil, false
	case "_||_":
		a, ac := c.keys(f, args[0])
		b, bc := c.keys(f, args[1])
		if ac && bc {
			return union(a, b), true
		}
		return nil, false
	case "_==_":
		// kind == "x" for another kind lets no event of this kind through.
		for i := 0; i < 2; i++ {
			k, lit := args[i], args[1-i]
			if k.Kind() == ast.IdentKind && k.AsIdent() == "kind" && lit.Kind() == ast.LiteralKind {
				if s, ok := lit.AsLiteral().(types.String); ok && string(s) != string(f.kind) {
					return []string{}, true
				}
			}
		}
		for i := 0; i < 2; i++ {
			if isField(args[i]) && args[1-i].Kind() == ast.LiteralKind {
				if s, ok := args[1-i].AsLiteral().(types.String); ok {
					return []string{key(string(s))}, true
				}
			}
		}
	case "@in":
		if !isField(args[0]) {
			return nil, false
		}
		if l, ok := strList(args[1]); ok {
			out := []string{}
			for _, s := range l {
				out = union(out, []string{key(s)})
			}
			return out, true
		}
	case "startsWith", "startsWithAny":
		if !f.path || !call.IsMemberFunction() || !isField(call.Target()) || len(args) != 1 {
			return nil, false
		}
		var prefixes []string
		if call.FunctionName() == "startsWith" {
			if args[0].Kind() != ast.LiteralKind {
				return nil, false
			}
			s, ok := args[0].AsLiteral().(types.String)
			if !ok {
				return nil, false
			}
			prefixes = []string{string(s)}
		} else {
			l, ok := strList(args[0])
			if !ok {
				return nil, false
			}
			prefixes = l
		}
		out := []string{}
		for _, p := range prefixes {
			d, ok := prefixDir(p)
			if !ok {
				return nil, false
			}
			out = union(out, []string{d})
		}
		return out, true
	}
	return nil, false
}

// buildIndex puts each enabled rule of kind k in the buckets of the keys it allows (keys nil:
// every bucket and other), keeping load order.
func buildIndex(rules []*Rule, k event.Kind, keysOf func(*Rule) []string) *index {
	all := map[string]bool{}
	for _, r := range rules {
		for _, n := range keysOf(r) {
			all[n] = true
		}
	}
	by := map[string][]*Rule{}
	var other []*Rule
	for _, r := range rules {
		if !r.Enabled || !containsKind(r.Kinds, k) {
			continue
		}
		ks := keysOf(r)
		if ks == nil {
			other = append(other, r)
			for n := range all {
				by[n] = append(by[n], r)
			}
			continue
		}
		for _, n := range ks {
			by[n] = append(by[n], r)
		}
	}
	order := map[*Rule]int{}
	for i, r := range rules {
		order[r] = i
	}
	ix := &index{by: map[string]*bucket{}, other: &bucket{rules: other}}
	for n, rs := range by {
		sort.Slice(rs, func(i, j int) bool { return order[rs[i]] < order[rs[j]] })
		ix.by[n] = &bucket{rules: rs}
	}
	return ix
}
