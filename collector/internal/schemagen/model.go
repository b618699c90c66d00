// Package schemagen reads the event schema, the Go types of agent/event, and writes what
// follows from it: the collector's one-pass scanner for events, its ClickHouse rows, the DDL
// migrations that add new columns to both dialects, and agent/event/FIELDS.md. The types are
// read as source (go/parser), not by reflection, so that doc comments become documentation
// and a type that does not compile yet still gets a clear error.
package schemagen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// field is one member of a struct of agent/event.
type field struct {
	Name      string
	JSON      string // its JSON name
	OmitEmpty bool
	Type      string // as written in Go: string, uint32, []string, [6]uint64, *Exec, time.Time, Kind
	Basic     string // the underlying basic type for named types (Kind: string); Type otherwise
	Doc       string // its doc or line comment, one line
	Col       string // ch tag name ("" when no column, for part members and call records)
	ColSet    bool   // a ch tag is present
	LC        bool   // LowCardinality in the modern dialect
	IP        bool   // an address: the addr column when it parses, path otherwise
	Table     bool   // a part with a table of its own
	Skip      bool   // ch:"-"
	Embedded  bool
}

type structType struct {
	Name   string
	Doc    string
	Fields []field
}

type constant struct{ Name, Value, Doc string }

// model is what the generator knows of agent/event.
type model struct {
	structs map[string]*structType
	order   []string          // struct names in source order
	named   map[string]string // named non-struct types and their underlying type
	kinds   []constant        // the Kind constants, in source order
}

func loadModel(dir string) (*model, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read event package: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	m := &model{structs: map[string]*structType{}, named: map[string]string{}}
	fset := token.NewFileSet()
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse event package: %w", err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			switch g.Tok {
			case token.TYPE:
				for _, sp := range g.Specs {
					ts := sp.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil {
						doc = g.Doc
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						m.named[ts.Name.Name] = typeString(ts.Type)
						continue
					}
					s, err := m.structOf(ts.Name.Name, doc, st)
					if err != nil {
						return nil, err
					}
					m.structs[s.Name] = s
					m.order = append(m.order, s.Name)
				}
			case token.CONST:
				for _, sp := range g.Specs {
					vs := sp.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" || len(vs.Values) != 1 {
						continue
					}
					lit, ok := vs.Values[0].(*ast.BasicLit)
					if !ok {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					m.kinds = append(m.kinds, constant{vs.Names[0].Name, v, comment(vs.Doc, vs.Comment)})
				}
			}
		}
	}
	return m, m.check()
}

func (m *model) structOf(name string, doc *ast.CommentGroup, st *ast.StructType) (*structType, error) {
	s := &structType{Name: name, Doc: oneLine(doc.Text())}
	for _, f := range st.Fields.List {
		fl := field{Type: typeString(f.Type), Doc: comment(f.Doc, f.Comment)}
		if len(f.Names) == 0 {
			fl.Name, fl.Embedded = fl.Type, true
			s.Fields = append(s.Fields, fl)
			continue
		}
		if len(f.Names) > 1 {
			return nil, fmt.Errorf("%s: declare one member a line", name)
		}
		fl.Name = f.Names[0].Name
		tag := ""
		if f.Tag != nil {
			tag, _ = strconv.Unquote(f.Tag.Value)
		}
		st := reflect.StructTag(tag)
		js, ok := st.Lookup("json")
		if !ok {
			return nil, fmt.Errorf("%s.%s: no json tag", name, fl.Name)
		}
		opts := strings.Split(js, ",")
		fl.JSON = opts[0]
		for _, o := range opts[1:] {
			fl.OmitEmpty = fl.OmitEmpty || o == "omitempty"
		}
		if ch, ok := st.Lookup("ch"); ok {
			fl.ColSet = true
			opts := strings.Split(ch, ",")
			fl.Col, fl.Skip = opts[0], opts[0] == "-"
			for _, o := range opts[1:] {
				switch o {
				case "lc":
					fl.LC = true
				case "ip":
					fl.IP = true
				case "table":
					fl.Table = true
				default:
					return nil, fmt.Errorf("%s.%s: unknown ch option %q", name, fl.Name, o)
				}
			}
		}
		s.Fields = append(s.Fields, fl)
	}
	return s, nil
}

// check resolves basic types and refuses what the scanner and the rows cannot follow.
func (m *model) check() error {
	for _, s := range m.structs {
		for i := range s.Fields {
			f := &s.Fields[i]
			f.Basic = f.Type
			if u, ok := m.named[f.Type]; ok {
				f.Basic = u
			}
		}
	}
	ev, ok := m.structs["Event"]
	if !ok {
		return fmt.Errorf("no Event type")
	}
	kinds := map[string]bool{}
	for _, k := range m.kinds {
		kinds[k.Value] = true
	}
	parts := 0
	for i, f := range ev.Fields {
		if p := m.part(f); p != nil {
			parts++
			if !kinds[f.JSON] {
				return fmt.Errorf("Event.%s: no Kind constant %q for the part", f.Name, f.JSON)
			}
			delete(kinds, f.JSON)
			if err := m.checkPart(p, f.Table); err != nil {
				return err
			}
			continue
		}
		if parts > 0 {
			return fmt.Errorf("Event.%s: the parts must be Event's last members", f.Name)
		}
		if i == 0 && f.OmitEmpty {
			return fmt.Errorf("Event.%s: the first member must not be omitempty", f.Name)
		}
	}
	for k := range kinds {
		return fmt.Errorf("kind %q has no part in Event", k)
	}
	return nil
}

func (m *model) checkPart(p *structType, table bool) error {
	for i, f := range p.Fields {
		if i == 0 && f.OmitEmpty {
			return fmt.Errorf("%s.%s: the first member must not be omitempty", p.Name, f.Name)
		}
		if _, err := reader(f, table); err != nil {
			return fmt.Errorf("%s.%s: %w", p.Name, f.Name, err)
		}
	}
	return nil
}

// part is the struct of an Event member that is a kind-specific part (*Exec), nil otherwise.
func (m *model) part(f field) *structType {
	if !strings.HasPrefix(f.Type, "*") {
		return nil
	}
	return m.structs[f.Type[1:]]
}

func (m *model) kindConst(value string) string {
	for _, k := range m.kinds {
		if k.Value == value {
			return k.Name
		}
	}
	return ""
}

func typeString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return "*" + typeString(t.X)
	case *ast.SelectorExpr:
		return typeString(t.X) + "." + t.Sel.Name
	case *ast.ArrayType:
		n := ""
		if t.Len != nil {
			if l, ok := t.Len.(*ast.BasicLit); ok {
				n = l.Value
			}
		}
		return "[" + n + "]" + typeString(t.Elt)
	case *ast.MapType:
		return "map[" + typeString(t.Key) + "]" + typeString(t.Value)
	}
	return fmt.Sprintf("%T", e)
}

func comment(groups ...*ast.CommentGroup) string {
	var parts []string
	for _, g := range groups {
		if t := oneLine(g.Text()); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
