package query

import (
	"fmt"
	"sort"
	"strings"
)

// Shape says how the plugin turns a statement's rows into a frame.
type Shape string

const (
	Table   Shape = "table"   // rows as they are
	Series  Shape = "series"  // long rows (time, label..., value...) made wide, a series per label
	Matrix  Shape = "matrix"  // the tools × surfaces matrix, from (tool, surface, state, calls, violations)
	Logs    Shape = "logs"    // a call's events: time, body, level, ...
	Tree    Shape = "tree"    // process tree: node graph nodes and edges from exec and fork events
	Summary Shape = "summary" // one row made into (field, value) pairs
	Values  Shape = "values"  // (text, value) for template variables
)

// Statement is one SQL query of a panel, and how its rows become a frame.
type Statement struct {
	Name  string // the frame's name
	SQL   string
	Args  []any // positional arguments of SQL, when it has any
	Shape Shape
}

type builder struct {
	doc   string
	build func(p *Params) ([]Statement, error)
}

var types = map[string]builder{}

func register(name, doc string, b func(p *Params) []Statement) {
	types[name] = builder{doc, func(p *Params) ([]Statement, error) { return b(p), nil }}
}

func registerE(name, doc string, b func(p *Params) ([]Statement, error)) {
	types[name] = builder{doc, b}
}

// Types lists the query types with what each gives, sorted by name.
func Types() [][2]string {
	var out [][2]string
	for n, b := range types {
		out = append(out, [2]string{n, b.doc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// UnknownTypeError is a query type Build does not know: the request's mistake, not the
// server's.
type UnknownTypeError struct {
	Type  string
	Known []string // the types there are
}

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("query type %q is not known: want one of %s", e.Type, strings.Join(e.Known, ", "))
}

// Build gives the statements of a query type.
func Build(queryType string, p Params) ([]Statement, error) {
	b, ok := types[queryType]
	if !ok {
		var names []string
		for _, t := range Types() {
			names = append(names, t[0])
		}
		return nil, &UnknownTypeError{Type: queryType, Known: names}
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return b.build(&p)
}
