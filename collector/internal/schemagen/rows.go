package schemagen

import (
	"fmt"
	"strings"
)

// column is one ClickHouse column the generator fills from the schema.
type column struct {
	Name   string
	Go     string // the Go type of its values
	Legacy string // its type in each dialect
	Modern string
	from   []source // the members that fill it
}

// source is a member that fills a column: Event's own (part ""), or a part's.
type source struct {
	part  string // the Event member holding the part, "" for Event's own members
	field field
}

// goIdent turns a column name into a Go identifier: call_id is callID.
func goIdent(col string) string {
	parts := strings.Split(col, "_")
	for i, p := range parts {
		switch {
		case i == 0:
		case p == "id" || p == "ip":
			parts[i] = strings.ToUpper(p)
		default:
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// colType maps a member's Go type to its column's Go and ClickHouse types.
func colType(f field) (goType, legacy, modern string, err error) {
	switch {
	case f.IP:
		return "[16]byte", "FixedString(16)", "IPv6", nil
	case f.Basic == "string":
		modern = "String"
		if f.LC {
			modern = "LowCardinality(String)"
		}
		return "string", "String", modern, nil
	case f.Basic == "bool":
		return "uint8", "UInt8", "UInt8", nil
	case f.Basic == "int" || f.Basic == "int64":
		return "int64", "Int64", "Int64", nil
	case f.Basic == "int32":
		return "int32", "Int32", "Int32", nil
	case f.Basic == "uint64", f.Basic == "uint32", f.Basic == "uint16", f.Basic == "uint8":
		t := "UInt" + strings.TrimPrefix(f.Basic, "uint")
		return f.Basic, t, t, nil
	case f.Basic == "time.Time":
		return "time.Time", "DateTime", "DateTime64(9, 'UTC')", nil
	}
	return "", "", "", fmt.Errorf("%s: type %s has no column type", f.Name, f.Type)
}

// eventColumns are the events table's columns from the schema (detail and legacy's time_ns
// are added around them).
func (m *model) eventColumns() ([]*column, error) {
	var cols []*column
	byName := map[string]*column{}
	add := func(name string, s source) error {
		g, l, md, err := colType(s.field)
		if err != nil {
			return err
		}
		c := byName[name]
		if c == nil {
			c = &column{Name: name, Go: g, Legacy: l, Modern: md}
			byName[name] = c
			cols = append(cols, c)
		} else if !compatible(c.Go, g) {
			return fmt.Errorf("column %s: %s and %s", name, c.Go, g)
		}
		if s.field.LC && c.Modern == "String" {
			c.Modern = md
		}
		c.from = append(c.from, s)
		return nil
	}
	ev := m.structs["Event"]
	for _, f := range ev.Fields {
		if p := m.part(f); p != nil {
			for _, pf := range p.Fields {
				if pf.Col == "" || pf.Skip {
					continue
				}
				if err := add(pf.Col, source{f.Name, pf}); err != nil {
					return nil, fmt.Errorf("%s.%s: %w", p.Name, pf.Name, err)
				}
				if pf.IP {
					if err := add("path", source{f.Name, field{Name: pf.Name, Basic: "string", Type: "string"}}); err != nil {
						return nil, err
					}
				}
			}
			continue
		}
		if f.Skip {
			continue
		}
		name := f.Col
		if name == "" {
			name = f.JSON
		}
		if err := add(name, source{"", f}); err != nil {
			return nil, fmt.Errorf("Event.%s: %w", f.Name, err)
		}
	}
	return cols, nil
}

// compatible says whether a member of Go type b can go into a column of Go type a.
func compatible(a, b string) bool {
	return a == b || (a == "int64" && (b == "int32" || b == "int")) || (a == "uint64" && (b == "uint32" || b == "uint16"))
}

// callColumns are the calls table's columns that CallRecord's ch tags map one to one; the
// others (arrays from maps, derived durations) rows.go maps by hand.
func (m *model) callColumns() ([]*column, error) {
	var cols []*column
	for _, f := range m.structs["CallRecord"].Fields {
		if f.Col == "" || f.Skip {
			continue
		}
		g, l, md, err := colType(f)
		if err != nil {
			return nil, fmt.Errorf("CallRecord.%s: %w", f.Name, err)
		}
		cols = append(cols, &column{Name: f.Col, Go: g, Legacy: l, Modern: md, from: []source{{"", f}}})
	}
	return cols, nil
}

// value is the Go expression of a member's column value, from v (e or e.Part).
func value(v string, c *column, f field) string {
	x := v + "." + f.Name
	switch {
	case f.Basic == "time.Time":
		return x + ".UTC()"
	case f.Basic == "bool":
		return "boolColumn(" + x + ")"
	case f.Type != c.Go:
		return c.Go + "(" + x + ")"
	}
	return x
}

func (m *model) rowsFile() (string, error) {
	cols, err := m.eventColumns()
	if err != nil {
		return "", err
	}
	ev := m.structs["Event"]
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("package collector\n\nimport (\n\"net/netip\"\n\"time\"\n\n\"github.com/bermsec/berm/agent/event\"\n)\n\n")

	// parts
	b.WriteString("// parts are the kind-specific parts of an event, stored as one JSON object in the detail\n")
	b.WriteString("// column: {\"open\":{...}}. Only set parts are written, so any combination round-trips.\ntype parts struct {\n")
	var names []string
	for _, f := range ev.Fields {
		if m.part(f) != nil {
			fmt.Fprintf(&b, "%s %s `json:\"%s,omitempty\"`\n", f.Name, strings.Replace(f.Type, "*", "*event.", 1), f.JSON)
			names = append(names, f.Name)
		}
	}
	b.WriteString("}\n\nfunc partsOf(e *event.Event) parts {\nreturn parts{")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("e." + n)
	}
	b.WriteString("}\n}\n\nfunc (p parts) setOn(e *event.Event) {\n")
	for _, n := range names {
		fmt.Fprintf(&b, "e.%s = p.%s\n", n, n)
	}
	b.WriteString("}\n\n")

	// eventRow
	b.WriteString("// eventRow is an event as the events table (and, for a part with a table of its own, that\n")
	b.WriteString("// table) stores it: decoding makes these on several goroutines, batches add them in journal order.\ntype eventRow struct {\n")
	for _, c := range cols {
		t := c.Go
		if c.Name == "time" {
			t += " // UTC"
		}
		fmt.Fprintf(&b, "%s %s\n", goIdent(c.Name), t)
	}
	b.WriteString("detail string // the parts as JSON (partsOf)\n")
	var table *field
	for i, f := range ev.Fields {
		if f.Table {
			table = &ev.Fields[i]
			fmt.Fprintf(&b, "%s *event.%s // for %s %s, its row in the %ss table\n", lowerFirst(f.Name), f.Type[1:], article(f.JSON), f.JSON, f.JSON)
		}
	}
	b.WriteString("}\n\n")

	// rowOf
	b.WriteString("// rowOf makes an event's row; detail is its parts as JSON. The columns that parts fill come\n")
	b.WriteString("// from the first part set, in Event's order.\nfunc rowOf(e *event.Event, detail string) eventRow {\nr := eventRow{\n")
	for _, c := range cols {
		for _, s := range c.from {
			if s.part == "" {
				fmt.Fprintf(&b, "%s: %s,\n", goIdent(c.Name), value("e", c, s.field))
			}
		}
	}
	b.WriteString("detail: detail,\n}\nswitch {\n")
	for _, f := range ev.Fields {
		p := m.part(f)
		if p == nil {
			continue
		}
		var body strings.Builder
		for _, pf := range p.Fields {
			if pf.Col == "" || pf.Skip {
				continue
			}
			x := "e." + f.Name + "." + pf.Name
			if pf.IP {
				fmt.Fprintf(&body, "if ip, err := netip.ParseAddr(%s); err == nil {\nr.%s = ip.As16()\n} else {\nr.path = %s // a unix socket\n}\n", x, goIdent(pf.Col), x)
				continue
			}
			for _, c := range cols {
				if c.Name == pf.Col {
					fmt.Fprintf(&body, "r.%s = %s\n", goIdent(c.Name), value("e."+f.Name, c, pf))
				}
			}
		}
		if body.Len() > 0 {
			fmt.Fprintf(&b, "case e.%s != nil:\n%s", f.Name, body.String())
		}
	}
	b.WriteString("}\n")
	if table != nil {
		fmt.Fprintf(&b, "if e.Kind == event.%s {\nr.%s = e.%s\n}\n", m.kindConst(table.JSON), lowerFirst(table.Name), table.Name)
	}
	b.WriteString("return r\n}\n\n")

	// eventRows
	b.WriteString("// eventRows are the events table's rows, column by column (clickhouse-go appends a typed\n")
	b.WriteString("// slice per column far faster than row by row).\ntype eventRows struct {\n")
	for _, c := range cols {
		fmt.Fprintf(&b, "%s []%s\n", goIdent(c.Name), c.Go)
		if c.Name == "time" {
			b.WriteString("timeNs []uint32 // legacy: nanoseconds within the second\n")
		}
	}
	b.WriteString("detail []string\n}\n\n")
	fmt.Fprintf(&b, "func (r *eventRows) len() int { return len(r.%s) }\n\n", goIdent(cols[0].Name))
	b.WriteString("func (r *eventRows) add(e *eventRow) {\n")
	for _, c := range cols {
		id := goIdent(c.Name)
		fmt.Fprintf(&b, "r.%s = append(r.%s, e.%s)\n", id, id, id)
		if c.Name == "time" {
			b.WriteString("r.timeNs = append(r.timeNs, uint32(e.time.Nanosecond()))\n")
		}
	}
	b.WriteString("r.detail = append(r.detail, e.detail)\n}\n\n")
	b.WriteString("func (r *eventRows) columns(d Dialect) []column {\ncols := make([]column, 0, " + fmt.Sprint(len(cols)+2) + ")\n")
	for _, c := range cols {
		id := goIdent(c.Name)
		if c.Go == "[16]byte" {
			fmt.Fprintf(&b, "cols = append(cols, column{%q, addrValues(d, r.%s)})\n", c.Name, id)
		} else {
			fmt.Fprintf(&b, "cols = append(cols, column{%q, r.%s})\n", c.Name, id)
		}
		if c.Name == "time" {
			b.WriteString("if d == Legacy {\ncols = append(cols, column{\"time_ns\", r.timeNs})\n}\n")
		}
	}
	b.WriteString("return append(cols, column{\"detail\", r.detail})\n}\n\n")
	b.WriteString("// reset empties the rows and keeps their memory, sized for n rows: a collector reuses its\n")
	b.WriteString("// few batches instead of growing new slices for every one.\nfunc (r *eventRows) reset(n int) {\n")
	for _, c := range cols {
		id := goIdent(c.Name)
		fmt.Fprintf(&b, "r.%s = resize(r.%s, n)\n", id, id)
		if c.Name == "time" {
			b.WriteString("r.timeNs = resize(r.timeNs, n)\n")
		}
	}
	b.WriteString("r.detail = resize(r.detail, n)\n}\n\n")

	// read back
	b.WriteString("// eventReadColumns are Event's own columns that read back into its members as they stand\n")
	b.WriteString("// (CHSource reads call_id, time and kind its own way); eventReadTargets are those members.\n")
	var rc, rt []string
	for _, c := range cols {
		for _, s := range c.from {
			if s.part == "" && s.field.Type == c.Go && c.Go != "time.Time" && c.Name != "call_id" {
				rc = append(rc, fmt.Sprintf("%q", c.Name))
				rt = append(rt, "&e."+s.field.Name)
			}
		}
	}
	fmt.Fprintf(&b, "var eventReadColumns = []string{%s}\n\n", strings.Join(rc, ", "))
	fmt.Fprintf(&b, "func eventReadTargets(e *event.Event) []any {\nreturn []any{%s}\n}\n\n", strings.Join(rt, ", "))

	// calls
	ccols, err := m.callColumns()
	if err != nil {
		return "", err
	}
	b.WriteString("// callColumns are the calls table's columns that CallRecord's ch tags map one to one.\ntype callColumns struct {\n")
	for _, c := range ccols {
		fmt.Fprintf(&b, "%s []%s\n", goIdent(c.Name), c.Go)
	}
	b.WriteString("}\n\nfunc (r *callColumns) add(c *event.CallRecord) {\n")
	for _, c := range ccols {
		id := goIdent(c.Name)
		fmt.Fprintf(&b, "r.%s = append(r.%s, %s)\n", id, id, value("c", c, c.from[0].field))
	}
	b.WriteString("}\n\nfunc (r *callColumns) columns() []column {\nreturn []column{")
	for i, c := range ccols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{%q, r.%s}", c.Name, goIdent(c.Name))
	}
	b.WriteString("}\n}\n\n")
	b.WriteString("func boolColumn(v bool) uint8 {\nif v {\nreturn 1\n}\nreturn 0\n}\n")
	return b.String(), nil
}

func article(s string) string {
	if strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}
