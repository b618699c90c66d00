package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/policy/yamlerr"
)

// Load reads and validates a policy file. A returned error is an Errors listing every problem.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data)
}

// Parse validates policy text; name is the file name used in errors.
func Parse(name string, data []byte) (*Policy, error) {
	return parseExtending(name, data, nil)
}

// parse decodes data over base (the strict spec; nil while parsing the strict file itself,
// which must then spell out every field).
func parse(name string, data []byte, base *Spec) (*Policy, error) {
	d := &decoder{file: name, pos: map[string]pos{}, base: base}
	p := &Policy{File: name, pos: d.pos}
	if base != nil {
		p.Spec = cloneSpec(*base)
	}
	root, err := d.document(data)
	if err != nil {
		return nil, err
	}
	d.policy(root, p)
	if len(d.errs) == 0 {
		d.crossCheck(root, p)
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return p, nil
}

type decoder struct {
	file string
	errs Errors
	pos  map[string]pos
	base *Spec
}

func (d *decoder) document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: d.file, Line: 1, Col: 1, Msg: "empty policy: expected a ToolPolicy document"}}
		}
		return nil, Errors{syntaxError(d.file, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: d.file, Line: extra.Line, Col: extra.Column, Msg: "expected one document, found another"}}
	}
	if len(doc.Content) == 0 {
		return nil, Errors{{File: d.file, Line: 1, Col: 1, Msg: "empty policy: expected a ToolPolicy document"}}
	}
	return doc.Content[0], nil
}

func (d *decoder) fail(n *yaml.Node, field, format string, a ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Col: n.Column, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// describe spells a node for "got ..." in messages.
var describe = yamlerr.Describe

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

type fields map[string]func(n *yaml.Node, field string)

// mapping decodes a mapping: each key through its handler, unknown and repeated keys refused,
// required keys checked.
func (d *decoder) mapping(n *yaml.Node, field string, fs fields, required ...string) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got %s", describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		sub := join(field, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.fail(k, field, "expected a field name, got %s", describe(k))
			continue
		}
		if seen[k.Value] {
			d.fail(k, sub, "field given twice")
			continue
		}
		seen[k.Value] = true
		f, ok := fs[k.Value]
		if !ok {
			known := slices.Sorted(maps.Keys(fs))
			d.fail(k, sub, "unknown field, expected one of %s", strings.Join(known, ", "))
			continue
		}
		d.pos[sub] = pos{v.Line, v.Column}
		f(v, sub)
	}
	for _, r := range required {
		if !seen[r] {
			d.fail(n, join(field, r), "required field missing")
		}
	}
}

// scalar returns a scalar's text when its tag is one of tags.
func (d *decoder) scalar(n *yaml.Node, field, expected string, tags ...string) (string, bool) {
	if n.Kind != yaml.ScalarNode || !slices.Contains(tags, n.Tag) {
		d.fail(n, field, "expected %s, got %s", expected, describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(n *yaml.Node, field string, dst *string) {
	if s, ok := d.scalar(n, field, "a string", "!!str"); ok {
		*dst = s
	}
}

func (d *decoder) boolean(n *yaml.Node, field string, dst *bool) {
	if s, ok := d.scalar(n, field, "true or false", "!!bool"); ok {
		*dst = s == "true" || s == "True" || s == "TRUE"
	}
}

func (d *decoder) oneOf(n *yaml.Node, field string, dst *string, choices ...string) {
	s, ok := d.scalar(n, field, strings.Join(choices, " or "), "!!str")
	if !ok {
		return
	}
	if !slices.Contains(choices, s) {
		d.fail(n, field, "expected %s, got %s", strings.Join(choices, " or "), describe(n))
		return
	}
	*dst = s
}

// list decodes a sequence item by item into a fresh slice (an empty list is meaningful): a
// list replaces the parent's (strict's). The additive form {add: [...], remove: [...]} starts
// from the parent's list instead: add appends entries, remove takes out entries the parent
// has (an entry it does not have is an error, so a typo does not pass for a removal).
func list[T any](d *decoder, n *yaml.Node, field string, dst *[]T, item func(n *yaml.Node, field string) (T, bool)) {
	if n.Kind == yaml.MappingNode {
		additive(d, n, field, dst, item)
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list, got %s", describe(n))
		return
	}
	out := make([]T, 0, len(n.Content))
	for i, c := range n.Content {
		c = resolve(c)
		sub := fmt.Sprintf("%s[%d]", field, i)
		d.pos[sub] = pos{c.Line, c.Column}
		if v, ok := item(c, sub); ok {
			out = append(out, v)
		}
	}
	*dst = out
}

// additive is list's {add, remove} form over the parent's entries in *dst.
func additive[T any](d *decoder, n *yaml.Node, field string, dst *[]T, item func(n *yaml.Node, field string) (T, bool)) {
	cur := slices.Clone(*dst)
	var add, remove []T
	d.mapping(n, field, fields{
		"add":    func(n *yaml.Node, f string) { list(d, resolve(n), f, &add, item) },
		"remove": func(n *yaml.Node, f string) { list(d, resolve(n), f, &remove, item) },
	})
	for i, r := range remove {
		j := slices.IndexFunc(cur, func(c T) bool { return reflect.DeepEqual(c, r) })
		if j < 0 {
			d.fail(n, fmt.Sprintf("%s.remove[%d]", field, i), "%v is not in the parent policy's list", r)
			continue
		}
		cur = slices.Delete(cur, j, j+1)
	}
	for _, a := range add {
		if !slices.ContainsFunc(cur, func(c T) bool { return reflect.DeepEqual(c, a) }) {
			cur = append(cur, a)
		}
	}
	if cur == nil {
		cur = []T{}
	}
	*dst = cur
}
