package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/yamlerr"
)

// Severities and surfaces a rule may have.
var (
	Severities = []string{"critical", "high", "medium", "low", "info"}
	Surfaces   = event.Surfaces
)

var (
	ruleIDRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	nameRe      = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	techniqueRe = regexp.MustCompile(`^T[0-9]{4}(\.[0-9]{3})?$`)
)

type listSpec struct {
	name  string
	strs  []string
	ints  []int64
	isInt bool
	src   *source
	node  *yaml.Node
}

type macroSpec struct {
	name string
	expr text
}

type exceptionSpec struct {
	name string
	cond text
}

// sequenceSpec makes a rule fire only on an event that follows an earlier one of the call:
// first is the earlier event's condition; firstKey and key, when set, must give the same value
// on the two events (what was written is what is executed).
type sequenceSpec struct {
	first    *text
	firstKey *text
	key      *text
	within   time.Duration
	node     *yaml.Node
}

type windowSpec struct {
	count    int
	within   time.Duration
	by       *text
	distinct *text
	node     *yaml.Node
}

// testCase is a sequence of events evaluated from a fresh state.
type testCase struct {
	match  bool
	events []event.Event
	line   int
}

type ruleSpec struct {
	src         *source
	node        *yaml.Node
	id          string
	title       string
	description string
	severity    string
	surface     string
	technique   []string
	kinds       []event.Kind
	kindNode    *yaml.Node
	condition   *text
	exceptions  []exceptionSpec
	output      *text
	window      *windowSpec
	sequence    *sequenceSpec
	enabled     bool
	tags        []string
	tests       []testCase
}

// loader gathers the specs of every file of a load and the issues found on the way.
type loader struct {
	issues []Issue
	lists  []*listSpec
	macros []*macroSpec
	rules  []*ruleSpec
}

func (l *loader) issue(src *source, n *yaml.Node, rule, format string, args ...any) {
	p := yamlerr.At(src.name, n)
	l.issues = append(l.issues, Issue{File: p.File, Line: p.Line, Col: p.Col, Rule: rule, Msg: fmt.Sprintf(format, args...)})
}

// mapping walks a mapping node, rejecting unknown and repeated keys.
func (l *loader) mapping(src *source, n *yaml.Node, rule, what string, fields map[string]func(*yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		l.issue(src, n, rule, "%s: want a mapping, got %s", what, nodeKind(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		if !ok {
			known := slices.Sorted(maps.Keys(fields))
			l.issue(src, k, rule, "%s: unknown field %q (known: %s)", what, k.Value, strings.Join(known, ", "))
			continue
		}
		if seen[k.Value] {
			l.issue(src, k, rule, "%s: field %q given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		f(v)
	}
}

// nodeKind names a node for "got ..." in messages.
var nodeKind = yamlerr.Kind

func (l *loader) str(src *source, n *yaml.Node, rule, what string, dst *string) bool {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		l.issue(src, n, rule, "%s: want a string, got %s", what, nodeKind(n))
		return false
	}
	*dst = n.Value
	return true
}

func (l *loader) textOf(src *source, n *yaml.Node, rule, what string) *text {
	var s string
	if !l.str(src, n, rule, what, &s) {
		return nil
	}
	if strings.TrimSpace(s) == "" {
		l.issue(src, n, rule, "%s: empty", what)
		return nil
	}
	return &text{src: src, node: n, s: s}
}

// strs reads a string or a list of strings.
func (l *loader) strs(src *source, n *yaml.Node, rule, what string) []string {
	if n.Kind == yaml.ScalarNode {
		var s string
		if l.str(src, n, rule, what, &s) {
			return []string{s}
		}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.issue(src, n, rule, "%s: want a string or a list of strings, got %s", what, nodeKind(n))
		return nil
	}
	var out []string
	for _, c := range n.Content {
		var s string
		if l.str(src, c, rule, what, &s) {
			out = append(out, s)
		}
	}
	return out
}

// parse reads one rule file.
func (l *loader) parse(src *source, data []byte) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		// the message as yaml.v3 words it, "line N" included; the position from it
		p, _ := yamlerr.Syntax(src.name, data, err)
		l.issues = append(l.issues, Issue{File: p.File, Line: p.Line, Col: p.Col, Msg: "yaml: " + strings.TrimPrefix(err.Error(), "yaml: ")})
		return
	}
	if len(doc.Content) == 0 {
		return
	}
	root := doc.Content[0]
	l.mapping(src, root, "", "file", map[string]func(*yaml.Node){
		"lists":  func(n *yaml.Node) { l.parseLists(src, n) },
		"macros": func(n *yaml.Node) { l.parseMacros(src, n) },
		"rules": func(n *yaml.Node) {
			if n.Kind != yaml.SequenceNode {
				l.issue(src, n, "", "rules: want a list, got %s", nodeKind(n))
				return
			}
			for _, r := range n.Content {
				l.parseRule(src, r)
			}
		},
	})
}

func (l *loader) parseLists(src *source, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		l.issue(src, n, "", "lists: want a mapping of name to list, got %s", nodeKind(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !nameRe.MatchString(k.Value) {
			l.issue(src, k, "", "lists: name %q: want lower_snake_case", k.Value)
			continue
		}
		if v.Kind != yaml.SequenceNode {
			l.issue(src, v, "", "list %q: want a list, got %s", k.Value, nodeKind(v))
			continue
		}
		ls := &listSpec{name: k.Value, src: src, node: k, isInt: len(v.Content) > 0}
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode || c.Tag != "!!int" {
				ls.isInt = false
			}
		}
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode {
				l.issue(src, c, "", "list %q: items must be scalars, got %s", k.Value, nodeKind(c))
				continue
			}
			if ls.isInt {
				var x int64
				if err := c.Decode(&x); err != nil {
					l.issue(src, c, "", "list %q: %v", k.Value, err)
				}
				ls.ints = append(ls.ints, x)
			} else {
				ls.strs = append(ls.strs, c.Value)
			}
		}
		l.lists = append(l.lists, ls)
	}
}

func (l *loader) parseMacros(src *source, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		l.issue(src, n, "", "macros: want a mapping of name to expression, got %s", nodeKind(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !nameRe.MatchString(k.Value) {
			l.issue(src, k, "", "macros: name %q: want lower_snake_case", k.Value)
			continue
		}
		if t := l.textOf(src, v, "", "macro "+k.Value); t != nil {
			l.macros = append(l.macros, &macroSpec{name: k.Value, expr: *t})
		}
	}
}

func (l *loader) parseRule(src *source, n *yaml.Node) {
	r := &ruleSpec{src: src, node: n, enabled: true}
	// The id first, so that every other issue of the rule can name it.
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "id" && n.Content[i+1].Kind == yaml.ScalarNode {
				r.id = n.Content[i+1].Value
			}
		}
	}
	id := r.id
	var testsNode *yaml.Node
	set := map[string]bool{}
	l.mapping(src, n, id, "rule", map[string]func(*yaml.Node){
		"id": func(v *yaml.Node) {
			set["id"] = true
			if !ruleIDRe.MatchString(v.Value) {
				l.issue(src, v, id, "id: want lower-kebab-case, got %q", v.Value)
			}
		},
		"title":       func(v *yaml.Node) { set["title"] = l.str(src, v, id, "title", &r.title) },
		"description": func(v *yaml.Node) { set["description"] = l.str(src, v, id, "description", &r.description) },
		"severity": func(v *yaml.Node) {
			set["severity"] = true
			if l.str(src, v, id, "severity", &r.severity) && !contains(Severities, r.severity) {
				l.issue(src, v, id, "severity: %q is not one of %s", r.severity, strings.Join(Severities, ", "))
			}
		},
		"surface": func(v *yaml.Node) {
			set["surface"] = true
			if l.str(src, v, id, "surface", &r.surface) && !contains(Surfaces, r.surface) {
				l.issue(src, v, id, "surface: %q is not one of %s", r.surface, strings.Join(Surfaces, ", "))
			}
		},
		"technique": func(v *yaml.Node) {
			set["technique"] = true
			r.technique = l.strs(src, v, id, "technique")
			for i, t := range r.technique {
				if !techniqueRe.MatchString(t) {
					at := v
					if v.Kind == yaml.SequenceNode {
						at = v.Content[i]
					}
					l.issue(src, at, id, "technique: %q is not a MITRE ATT&CK technique id (T1234 or T1234.001)", t)
				}
			}
		},
		"kind": func(v *yaml.Node) {
			r.kindNode = v
			for _, k := range l.strs(src, v, id, "kind") {
				if !validKind(k) {
					l.issue(src, v, id, "kind: %q is not an event kind a rule can match (%s)", k, kindNames())
					continue
				}
				r.kinds = append(r.kinds, event.Kind(k))
			}
		},
		"condition": func(v *yaml.Node) {
			set["condition"] = true
			r.condition = l.textOf(src, v, id, "condition")
		},
		"exceptions": func(v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				l.issue(src, v, id, "exceptions: want a list, got %s", nodeKind(v))
				return
			}
			for _, e := range v.Content {
				var ex exceptionSpec
				l.mapping(src, e, id, "exception", map[string]func(*yaml.Node){
					"name":      func(v *yaml.Node) { l.str(src, v, id, "exception name", &ex.name) },
					"condition": func(v *yaml.Node) { ex.cond.node = v; ex.cond = deref(l.textOf(src, v, id, "exception condition")) },
				})
				if ex.name == "" || ex.cond.node == nil {
					l.issue(src, e, id, "exception: needs a name and a condition")
					continue
				}
				r.exceptions = append(r.exceptions, ex)
			}
		},
		"output": func(v *yaml.Node) {
			set["output"] = true
			r.output = l.textOf(src, v, id, "output")
		},
		"window":   func(v *yaml.Node) { r.window = l.parseWindow(src, v, id) },
		"sequence": func(v *yaml.Node) { r.sequence = l.parseSequence(src, v, id) },
		"enabled": func(v *yaml.Node) {
			if err := v.Decode(&r.enabled); err != nil {
				l.issue(src, v, id, "enabled: want true or false")
			}
		},
		"tags":  func(v *yaml.Node) { r.tags = l.strs(src, v, id, "tags") },
		"tests": func(v *yaml.Node) { set["tests"] = true; testsNode = v },
	})
	if n.Kind != yaml.MappingNode {
		return
	}
	for _, f := range []string{"id", "title", "description", "severity", "surface", "technique", "condition", "output", "tests"} {
		if !set[f] {
			l.issue(src, n, id, "missing field %q", f)
		}
	}
	if testsNode != nil {
		l.parseTests(src, testsNode, r)
	}
	l.rules = append(l.rules, r)
}

func deref(t *text) text {
	if t == nil {
		return text{}
	}
	return *t
}

func (l *loader) parseWindow(src *source, n *yaml.Node, id string) *windowSpec {
	w := &windowSpec{node: n}
	l.mapping(src, n, id, "window", map[string]func(*yaml.Node){
		"count": func(v *yaml.Node) {
			if err := v.Decode(&w.count); err != nil || w.count < 1 {
				l.issue(src, v, id, "window: count: want a positive integer, got %q", v.Value)
			}
		},
		"within": func(v *yaml.Node) {
			d, err := time.ParseDuration(v.Value)
			if err != nil || d <= 0 {
				l.issue(src, v, id, "window: within: want a positive duration like 10s, got %q", v.Value)
			}
			w.within = d
		},
		"by":       func(v *yaml.Node) { w.by = l.textOf(src, v, id, "window by") },
		"distinct": func(v *yaml.Node) { w.distinct = l.textOf(src, v, id, "window distinct") },
	})
	if w.count == 0 || w.within == 0 {
		l.issue(src, n, id, "window: needs count and within")
		return nil
	}
	return w
}

func (l *loader) parseSequence(src *source, n *yaml.Node, id string) *sequenceSpec {
	q := &sequenceSpec{node: n}
	l.mapping(src, n, id, "sequence", map[string]func(*yaml.Node){
		"after":     func(v *yaml.Node) { q.first = l.textOf(src, v, id, "sequence after") },
		"after_key": func(v *yaml.Node) { q.firstKey = l.textOf(src, v, id, "sequence after_key") },
		"key":       func(v *yaml.Node) { q.key = l.textOf(src, v, id, "sequence key") },
		"within": func(v *yaml.Node) {
			d, err := time.ParseDuration(v.Value)
			if err != nil || d <= 0 {
				l.issue(src, v, id, "sequence: within: want a positive duration like 1m, got %q", v.Value)
			}
			q.within = d
		},
	})
	if q.first == nil || q.within == 0 {
		l.issue(src, n, id, "sequence: needs after and within")
		return nil
	}
	if (q.firstKey == nil) != (q.key == nil) {
		l.issue(src, n, id, "sequence: after_key and key go together (the values the two events must share)")
		return nil
	}
	return q
}

func (l *loader) parseTests(src *source, n *yaml.Node, r *ruleSpec) {
	var nm, nn int
	l.mapping(src, n, r.id, "tests", map[string]func(*yaml.Node){
		"match":   func(v *yaml.Node) { nm = l.parseCases(src, v, r, true) },
		"nomatch": func(v *yaml.Node) { nn = l.parseCases(src, v, r, false) },
	})
	if nm == 0 {
		l.issue(src, n, r.id, "tests: needs at least one case under match")
	}
	if nn == 0 {
		l.issue(src, n, r.id, "tests: needs at least one case under nomatch")
	}
}

// parseCases reads test cases. A case is an event, or a sequence {events: [...], repeat: N,
// every: 10ms} for rules that need several events (windows).
func (l *loader) parseCases(src *source, n *yaml.Node, r *ruleSpec, match bool) int {
	if n.Kind != yaml.SequenceNode {
		l.issue(src, n, r.id, "tests: want a list of cases, got %s", nodeKind(n))
		return 0
	}
	count := 0
	for _, c := range n.Content {
		tc := testCase{match: match, line: c.Line}
		repeat, every := 1, time.Millisecond
		var evNodes []*yaml.Node
		if c.Kind == yaml.MappingNode && hasKey(c, "events") {
			l.mapping(src, c, r.id, "test case", map[string]func(*yaml.Node){
				"events": func(v *yaml.Node) {
					if v.Kind != yaml.SequenceNode {
						l.issue(src, v, r.id, "test case: events: want a list, got %s", nodeKind(v))
						return
					}
					evNodes = v.Content
				},
				"repeat": func(v *yaml.Node) {
					if err := v.Decode(&repeat); err != nil || repeat < 1 || repeat > 100000 {
						l.issue(src, v, r.id, "test case: repeat: want 1..100000, got %q", v.Value)
						repeat = 1
					}
				},
				"every": func(v *yaml.Node) {
					d, err := time.ParseDuration(v.Value)
					if err != nil || d < 0 {
						l.issue(src, v, r.id, "test case: every: want a duration, got %q", v.Value)
					}
					every = d
				},
			})
		} else {
			evNodes = []*yaml.Node{c}
		}
		var base []event.Event
		for _, en := range evNodes {
			ev, err := decodeEvent(en)
			if err != nil {
				l.issue(src, en, r.id, "test event: %v", err)
				continue
			}
			base = append(base, ev)
		}
		if len(base) == 0 {
			continue
		}
		start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := 0; i < repeat; i++ {
			for _, ev := range base {
				ev := ev
				seq := uint64(len(tc.events) + 1)
				if ev.CallID == "" {
					ev.CallID = "test-call"
				}
				if ev.Seq == 0 {
					ev.Seq = seq
				}
				if ev.Time.IsZero() {
					ev.Time = start.Add(time.Duration(seq-1) * every)
				}
				// {{i}} in a DNS name is the repetition's number: many different names
				if ev.DNS != nil && strings.Contains(ev.DNS.Name, "{{i}}") {
					d := *ev.DNS
					d.Name = strings.ReplaceAll(d.Name, "{{i}}", strconv.Itoa(i))
					ev.DNS = &d
				}
				tc.events = append(tc.events, ev)
			}
		}
		r.tests = append(r.tests, tc)
		count++
	}
	return count
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// decodeEvent reads a test event written with the event's JSON field names. The kind may be
// left out: it is the part that is set.
func decodeEvent(n *yaml.Node) (event.Event, error) {
	var ev event.Event
	var v any
	if err := n.Decode(&v); err != nil {
		return ev, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return ev, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return ev, err
	}
	if ev.Kind == "" {
		switch {
		case ev.Exec != nil:
			ev.Kind = event.KindExec
		case ev.Fork != nil:
			ev.Kind = event.KindFork
		case ev.Exit != nil:
			ev.Kind = event.KindExit
		case ev.Open != nil:
			ev.Kind = event.KindOpen
		case ev.Connect != nil:
			ev.Kind = event.KindConnect
		case ev.Syscall != nil:
			ev.Kind = event.KindSyscall
		case ev.Denial != nil:
			ev.Kind = event.KindDenial
		case ev.Limit != nil:
			ev.Kind = event.KindLimit
		case ev.Drop != nil:
			ev.Kind = event.KindDrop
		case ev.DNS != nil:
			ev.Kind = event.KindDNS
		default:
			return ev, fmt.Errorf("no kind and no kind-specific part (exec, open, syscall, ...)")
		}
	}
	if ev.Kind == event.KindSyscall && ev.Syscall != nil && ev.Syscall.Name != "" && ev.Syscall.Nr == 0 {
		if nr, err := event.SyscallNumber(ev.Syscall.Name); err == nil {
			ev.Syscall.Nr = nr
		}
	}
	return ev, nil
}

func validKind(k string) bool {
	for _, x := range event.Kinds {
		if string(x) == k && x != event.KindAlert {
			return true
		}
	}
	return false
}

func kindNames() string {
	var out []string
	for _, k := range event.Kinds {
		if k != event.KindAlert {
			out = append(out, string(k))
		}
	}
	return strings.Join(out, ", ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// filesOf expands paths (files, or directories searched for *.yaml and *.yml) in a stable order.
func filesOf(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}
