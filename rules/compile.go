package rules

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/bermsec/berm/agent/event"
)

// Rule is one compiled detection rule.
type Rule struct {
	ID          string
	Title       string
	Description string
	Severity    string
	Surface     string
	Technique   []string
	Kinds       []event.Kind // the event kinds the rule is evaluated on
	Syscalls    []string     // for syscall rules: the only syscall names that can match (nil: any)
	ExeNames    []string     // for exec rules: the only exec.exe_name values that can match (nil: any)
	PathDirs    []string     // for open rules: the only first components of file.path that can match (nil: any)
	Enabled     bool
	Tags        []string
	Window      *Window
	Sequence    *Sequence
	Condition   string
	File        string
	Line        int

	cond       cel.Program
	exceptions []exception
	output     []outPart
	by         cel.Program
	distinct   cel.Program
	tests      []testCase
	// A sequence rule's cond is (after) || (condition), what the index and a bucket evaluate;
	// trigger is its own condition, first the earlier event's, keys the values they share.
	trigger, first, firstKey, key cel.Program
}

// Sequence makes a rule stateful: it fires on an event matching its condition that follows,
// within Within in the same call, an event matching After (with the same key value, if set).
type Sequence struct {
	After    string
	AfterKey string
	Key      string
	Within   time.Duration
}

// Window makes a rule stateful: it fires when Count matching events of one call (and one
// value of By, if set) happen within Within.
type Window struct {
	Count  int
	Within time.Duration
	By     string
	// Distinct, when set, counts only matches whose value of it was not seen in the window
	// already: many different subdomains, not one name asked many times.
	Distinct string
}

type exception struct {
	name string
	prg  cel.Program
}

// outPart is literal text, or an expression whose value is printed.
type outPart struct {
	lit string
	prg cel.Program
}

// Set is a compiled, consistent set of rules, indexed by what they can match.
type Set struct {
	rules []*Rule
	files []string
	// byKind holds the rules evaluated on each kind, in load order. Syscall, exec and open
	// events are indexed further by a key (index.go): byKey[kind].by[key] holds the rules that
	// can match an event with that key.
	byKind      map[event.Kind]*bucket
	byKey       map[event.Kind]*index // syscall, exec and open events: by their key (index.go)
	fingerprint string                // of the files when they were read (Watch compares with it)
}

// bucket is the rules one event is evaluated against. all, when set, evaluates every rule's
// condition in one program (a list of bools): one activation frame per event instead of one
// per rule, and the macros the conditions share are computed once.
type bucket struct {
	rules []*Rule
	all   cel.Program
}

// Rules are the set's rules in load order, enabled or not.
func (s *Set) Rules() []*Rule { return s.rules }

// Files are the files the set was loaded from.
func (s *Set) Files() []string { return s.files }

// Len is the number of enabled rules.
func (s *Set) Len() int {
	n := 0
	for _, r := range s.rules {
		if r.Enabled {
			n++
		}
	}
	return n
}

// Rule finds a rule by id.
func (s *Set) Rule(id string) *Rule {
	for _, r := range s.rules {
		if r.ID == id {
			return r
		}
	}
	return nil
}

func (s *Set) candidates(ev *event.Event) *bucket {
	if ix := s.byKey[ev.Kind]; ix != nil {
		if b, ok := ix.by[eventKey(ev)]; ok {
			return b
		}
		return ix.other
	}
	return s.byKind[ev.Kind]
}

// reindex builds the lookup tables over the enabled rules.
func (s *Set) reindex() {
	byKind := map[event.Kind][]*Rule{}
	for _, r := range s.rules {
		if !r.Enabled {
			continue
		}
		for _, k := range r.Kinds {
			byKind[k] = append(byKind[k], r)
		}
	}
	s.byKind = map[event.Kind]*bucket{}
	for k, rs := range byKind {
		s.byKind[k] = &bucket{rules: rs}
	}
	s.byKey = map[event.Kind]*index{
		event.KindSyscall: buildIndex(s.rules, event.KindSyscall, func(r *Rule) []string { return r.Syscalls }),
		event.KindExec:    buildIndex(s.rules, event.KindExec, func(r *Rule) []string { return r.ExeNames }),
		event.KindOpen:    buildIndex(s.rules, event.KindOpen, func(r *Rule) []string { return r.PathDirs }),
	}
}

// combine gives every bucket of more than one rule its single program.
func (c *compiler) combine(s *Set) {
	var buckets []*bucket
	for _, b := range s.byKind {
		buckets = append(buckets, b)
	}
	for _, ix := range s.byKey {
		buckets = append(buckets, ix.other)
		for _, b := range ix.by {
			buckets = append(buckets, b)
		}
	}
	// Buckets often hold the same rules (a rule indexed under many programs, paths or
	// syscalls, with the same unindexed rules beside it): each distinct list is compiled
	// once (the shipped set: 357 buckets, 89 lists), the lists side by side (a CEL
	// environment serves concurrent compiles).
	at := map[string]int{}          // a distinct list's place in lists
	of := make([]int, len(buckets)) // the list of each bucket; -1: fewer than two rules
	var lists []string
	for i, b := range buckets {
		of[i] = -1
		if len(b.rules) < 2 {
			continue
		}
		parts := make([]string, len(b.rules))
		for j, r := range b.rules {
			parts[j] = "(" + r.Condition + ")"
		}
		src := "[" + strings.Join(parts, ",\n") + "]"
		n, seen := at[src]
		if !seen {
			n, at[src] = len(lists), len(lists)
			lists = append(lists, src)
		}
		of[i] = n
	}
	programs := make([]cel.Program, len(lists))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(lists)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int(next.Add(1)) - 1; n < len(lists); n = int(next.Add(1)) - 1 {
				programs[n] = c.combined(lists[n])
			}
		}()
	}
	wg.Wait()
	for i, b := range buckets {
		if of[i] >= 0 {
			b.all = programs[of[i]]
		}
	}
}

// combined is the program of a bucket's list of conditions; nil when it does not compile as
// one (each condition compiled alone: the rules are then evaluated one by one).
func (c *compiler) combined(src string) cel.Program {
	checked, iss := c.env.Compile(src)
	if iss.Err() != nil {
		return nil
	}
	checked, iss, err := c.inlineMacros(c.env, checked)
	if err != nil || iss.Err() != nil {
		return nil
	}
	prg, err := c.env.Program(checked, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil
	}
	return prg
}

// compiler turns the specs of one load into a Set.
type compiler struct {
	*loader
	env    *cel.Env // base declarations, lists and every macro as a typed variable
	inline []*cel.InlineVariable
	lists  map[string]*listSpec
}

func (l *loader) compile(files []string) (*Set, error) {
	c := &compiler{loader: l, lists: map[string]*listSpec{}}
	opts := envOptions()
	reserved := map[string]bool{"kind": true}
	for _, v := range variables {
		reserved[v.name] = true
	}
	for _, ls := range l.lists {
		if reserved[ls.name] || c.lists[ls.name] != nil {
			l.issue(ls.src, ls.node, "", "list %q: name already used", ls.name)
			continue
		}
		c.lists[ls.name] = ls
		if ls.isInt {
			opts = append(opts, cel.Constant(ls.name, cel.ListType(cel.IntType), types.NewDynamicList(types.DefaultTypeAdapter, ls.ints)))
		} else {
			opts = append(opts, cel.Constant(ls.name, cel.ListType(cel.StringType), types.NewStringList(types.DefaultTypeAdapter, ls.strs)))
		}
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("rules: cel environment: %w", err)
	}
	c.env = env
	for _, m := range l.macros {
		if reserved[m.name] || c.lists[m.name] != nil {
			l.issue(m.expr.src, m.expr.node, "", "macro %q: name already used", m.name)
			m.name = ""
		}
	}
	c.compileMacros()

	s := &Set{files: files}
	ids := map[string]*ruleSpec{}
	for _, rs := range l.rules {
		if prev, dup := ids[rs.id]; dup && rs.id != "" {
			l.issue(rs.src, rs.node, rs.id, "duplicate rule id (first defined at %s:%d)", prev.src.name, prev.node.Line)
			continue
		}
		ids[rs.id] = rs
		if r := c.compileRule(rs); r != nil {
			s.rules = append(s.rules, r)
		}
	}
	if len(l.issues) > 0 {
		return nil, &LoadError{Issues: l.issues}
	}
	s.reindex()
	c.combine(s)
	return s, nil
}

// compileMacros checks macros in dependency order; each is stored fully expanded so that a
// rule's condition inlines to an expression over variables and lists only.
func (c *compiler) compileMacros() {
	byName := map[string]*macroSpec{}
	for _, m := range c.macros {
		if m.name == "" {
			continue
		}
		if byName[m.name] != nil {
			c.issue(m.expr.src, m.expr.node, "", "macro %q: defined twice", m.name)
			continue
		}
		byName[m.name] = m
	}
	deps := map[string][]string{}
	for name, m := range byName {
		parsed, iss := c.env.Parse(m.expr.s)
		if iss.Err() != nil {
			c.celIssues(m.expr, "", "macro "+name, iss)
			delete(byName, name)
			continue
		}
		for _, id := range identsOf(parsed) {
			if byName[id] != nil || id == name {
				deps[name] = append(deps[name], id)
			}
		}
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string, []string) bool
	visit = func(n string, path []string) bool {
		switch state[n] {
		case 1:
			m := byName[n]
			c.issue(m.expr.src, m.expr.node, "", "macro %q: cycle %s", n, strings.Join(append(path, n), " -> "))
			return false
		case 2:
			return true
		}
		state[n] = 1
		for _, d := range deps[n] {
			if byName[d] != nil && !visit(d, append(path, n)) {
				return false
			}
		}
		state[n] = 2
		order = append(order, n)
		return true
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		visit(n, nil)
	}
	env := c.env
	for _, n := range order {
		m := byName[n]
		checked, iss := env.Compile(m.expr.s)
		if iss.Err() != nil {
			c.celIssues(m.expr, "", "macro "+n, iss)
			continue
		}
		checked = c.expand(env, checked, m.expr, "", "macro "+n)
		if checked == nil {
			continue
		}
		c.inline = append(c.inline, cel.NewInlineVariable(n, checked))
		var err error
		if env, err = env.Extend(cel.Variable(n, checked.OutputType())); err != nil {
			c.issue(m.expr.src, m.expr.node, "", "macro %q: %v", n, err)
		}
	}
	c.env = env
}

// expand inlines the macros an expression uses, reporting what stops it at the expression.
func (c *compiler) expand(env *cel.Env, a *cel.Ast, t text, rule, what string) *cel.Ast {
	out, iss, err := c.inlineMacros(env, a)
	if err != nil {
		c.issue(t.src, t.node, rule, "%s: %v", what, err)
		return nil
	}
	if iss.Err() != nil {
		c.celIssues(t, rule, what+" (macros expanded)", iss)
		return nil
	}
	return out
}

// inlineMacros inlines the macros an expression uses: the optimizer's own error, or the
// expression's issues once expanded (nil when there were no macros to inline).
func (c *compiler) inlineMacros(env *cel.Env, a *cel.Ast) (*cel.Ast, *cel.Issues, error) {
	if len(c.inline) == 0 {
		return a, nil, nil
	}
	opt, err := cel.NewStaticOptimizer(cel.NewInliningOptimizer(c.inline...))
	if err != nil {
		return nil, nil, err
	}
	out, iss := opt.Optimize(env, a)
	return out, iss, nil
}

// celIssues reports CEL errors at their file positions, with CEL's rendering of the offending
// expression.
func (c *compiler) celIssues(t text, rule, what string, iss *cel.Issues) {
	src := common.NewTextSource(t.s)
	for _, e := range iss.Errors() {
		line, col := t.node.Line, t.node.Column
		if e.Location.Line() > 0 {
			if off, ok := src.LocationOffset(e.Location); ok {
				line, col = t.pos(utf8.RuneCountInString(t.s[:min(byteOffset(t.s, int(off)), len(t.s))]))
			}
		}
		c.issues = append(c.issues, Issue{File: t.src.name, Line: line, Col: col, Rule: rule,
			Msg: what + ": " + e.ToDisplayString(src)})
	}
}

// byteOffset converts CEL's code point offset into a byte offset of s.
func byteOffset(s string, runes int) int {
	i := 0
	for b := range s {
		if i == runes {
			return b
		}
		i++
	}
	return len(s)
}

func identsOf(a *cel.Ast) []string {
	var out []string
	for _, e := range ast.MatchDescendants(ast.NavigateAST(a.NativeRep()), ast.KindMatcher(ast.IdentKind)) {
		out = append(out, e.AsIdent())
	}
	return out
}

// compileExpr checks one expression of a rule and plans it. want is the required output type
// (nil: any).
func (c *compiler) compileExpr(t text, rule, what string, want *cel.Type) (*cel.Ast, cel.Program) {
	checked, iss := c.env.Compile(t.s)
	if iss.Err() != nil {
		c.celIssues(t, rule, what, iss)
		return nil, nil
	}
	if want != nil && !checked.OutputType().IsExactType(want) {
		c.issue(t.src, t.node, rule, "%s: must be %s, is %s: %s", what, want, checked.OutputType(), t.s)
		return nil, nil
	}
	checked = c.expand(c.env, checked, t, rule, what)
	if checked == nil {
		return nil, nil
	}
	prg, err := c.env.Program(checked, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		c.issue(t.src, t.node, rule, "%s: %v", what, err)
		return nil, nil
	}
	return checked, prg
}

func (c *compiler) compileRule(rs *ruleSpec) *Rule {
	r := &Rule{
		ID: rs.id, Title: rs.title, Description: rs.description, Severity: rs.severity,
		Surface: rs.surface, Technique: rs.technique, Enabled: rs.enabled, Tags: rs.tags,
		File: rs.src.name, Line: rs.node.Line, tests: rs.tests,
	}
	ok := true
	if rs.condition == nil {
		return nil
	}
	r.Condition = rs.condition.s
	checked, prg := c.compileExpr(*rs.condition, rs.id, "condition", cel.BoolType)
	r.cond = prg
	ok = prg != nil
	if q := rs.sequence; q != nil && ok {
		r.Sequence = &Sequence{After: q.first.s, Within: q.within}
		r.trigger = prg
		_, r.first = c.compileExpr(*q.first, rs.id, "sequence after", cel.BoolType)
		ok = r.first != nil
		if q.key != nil {
			r.Sequence.AfterKey, r.Sequence.Key = q.firstKey.s, q.key.s
			_, r.firstKey = c.compileExpr(*q.firstKey, rs.id, "sequence after_key", nil)
			_, r.key = c.compileExpr(*q.key, rs.id, "sequence key", nil)
			ok = ok && r.firstKey != nil && r.key != nil
		}
		if ok {
			either := *rs.condition
			either.s = "(" + q.first.s + ") || (" + rs.condition.s + ")"
			r.Condition = either.s
			checked, r.cond = c.compileExpr(either, rs.id, "sequence after or condition", cel.BoolType)
			ok = r.cond != nil
		}
		if rs.window != nil {
			c.issue(rs.src, q.node, rs.id, "sequence: a rule has a window or a sequence, not both")
			ok = false
		}
	}
	for _, ex := range rs.exceptions {
		if _, p := c.compileExpr(ex.cond, rs.id, "exception "+ex.name, cel.BoolType); p != nil {
			r.exceptions = append(r.exceptions, exception{name: ex.name, prg: p})
		} else {
			ok = false
		}
	}
	if rs.output != nil {
		parts, good := c.compileOutput(*rs.output, rs.id)
		r.output, ok = parts, ok && good
	}
	if w := rs.window; w != nil {
		r.Window = &Window{Count: w.count, Within: w.within}
		if w.distinct != nil {
			r.Window.Distinct = w.distinct.s
			if _, p := c.compileExpr(*w.distinct, rs.id, "window distinct", nil); p != nil {
				r.distinct = p
			} else {
				ok = false
			}
		}
		if w.by != nil {
			r.Window.By = w.by.s
			if _, p := c.compileExpr(*w.by, rs.id, "window by", nil); p != nil {
				r.by = p
			} else {
				ok = false
			}
		}
	}

	if checked == nil {
		return nil
	}
	// Which kinds the rule can match: the event parts its condition reads, or its kind field.
	read := map[event.Kind]bool{}
	for _, id := range identsOf(checked) {
		if k, isPart := kindOfVar[id]; isPart {
			read[k] = true
		}
	}
	if len(rs.kinds) > 0 {
		r.Kinds = rs.kinds
		for k := range read {
			if !containsKind(rs.kinds, k) {
				c.issue(rs.src, rs.kindNode, rs.id, "kind: the condition reads the %s part, but the rule is only evaluated on %v", k, rs.kinds)
				ok = false
			}
		}
	} else {
		for _, k := range event.Kinds {
			if read[k] {
				r.Kinds = append(r.Kinds, k)
			}
		}
		if len(r.Kinds) == 0 {
			c.issue(rs.src, rs.condition.node, rs.id, "condition reads no event part (exec, file, net, syscall, ...): set kind to say which events the rule applies to")
			ok = false
		}
	}
	if containsKind(r.Kinds, event.KindExec) {
		if names, constrained := c.keys(indexedFields[1], checked.NativeRep().Expr()); constrained {
			r.ExeNames = append([]string{}, names...)
		}
	}
	if containsKind(r.Kinds, event.KindOpen) {
		if dirs, constrained := c.keys(indexedFields[2], checked.NativeRep().Expr()); constrained {
			r.PathDirs = append([]string{}, dirs...)
		}
	}
	if containsKind(r.Kinds, event.KindSyscall) {
		if names, constrained := c.keys(indexedFields[0], checked.NativeRep().Expr()); constrained {
			r.Syscalls = names
			if r.Syscalls == nil {
				r.Syscalls = []string{}
			}
			for _, n := range names {
				if _, err := event.SyscallNumber(n); err != nil {
					c.issue(rs.src, rs.condition.node, rs.id, "condition: %v", err)
					ok = false
				}
			}
		}
	}
	if !ok {
		return nil
	}
	return r
}

func containsKind(ks []event.Kind, k event.Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		if !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// compileOutput splits an output template into text and ${expression} parts.
func (c *compiler) compileOutput(t text, rule string) ([]outPart, bool) {
	var parts []outPart
	s := t.s
	ok := true
	pos := 0 // rune offset of s[0] in t.s
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			if s != "" {
				parts = append(parts, outPart{lit: s})
			}
			return parts, ok
		}
		if i > 0 {
			parts = append(parts, outPart{lit: s[:i]})
		}
		exprStart := pos + utf8.RuneCountInString(s[:i+2])
		depth, end := 0, -1
		for j := i + 2; j < len(s) && end < 0; j++ {
			switch s[j] {
			case '{':
				depth++
			case '}':
				if depth == 0 {
					end = j
				}
				depth--
			}
		}
		if end < 0 {
			line, col := t.pos(exprStart - 2)
			c.issues = append(c.issues, Issue{File: t.src.name, Line: line, Col: col, Rule: rule, Msg: "output: unterminated ${"})
			return parts, false
		}
		expr := s[i+2 : end]
		sub := t
		sub.s = expr
		// Positions inside the placeholder: map through the whole template's text.
		checked, iss := c.env.Compile(expr)
		if iss.Err() != nil {
			src := common.NewTextSource(expr)
			for _, e := range iss.Errors() {
				off, _ := src.LocationOffset(e.Location)
				line, col := t.pos(exprStart + int(off))
				c.issues = append(c.issues, Issue{File: t.src.name, Line: line, Col: col, Rule: rule,
					Msg: "output: " + e.ToDisplayString(src)})
			}
			ok = false
		} else if checked = c.expand(c.env, checked, sub, rule, "output"); checked != nil {
			prg, err := c.env.Program(checked, cel.EvalOptions(cel.OptOptimize))
			if err != nil {
				c.issue(t.src, t.node, rule, "output: %v", err)
				ok = false
			} else {
				parts = append(parts, outPart{prg: prg})
			}
		} else {
			ok = false
		}
		pos += utf8.RuneCountInString(s[:end+1])
		s = s[end+1:]
	}
}
