// Package yamlerr is how berm reports a problem in a YAML file it reads (policies, rules):
// where it is, file:line:col, what it is in (a field, a rule), and what is wrong. One format,
// so that an editor or a reader finds the place the same way whichever file it was.
package yamlerr

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Pos is a place in a file; Line 0 is the file as a whole.
type Pos struct {
	File      string
	Line, Col int
}

// At is the place of node n of file (the file as a whole for a nil node).
func At(file string, n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: file}
	}
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

func (p Pos) String() string {
	if p.Line <= 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Format is one problem: "file:line:col: in: msg", in (what the problem is inside of) left
// out when empty.
func Format(p Pos, in, msg string) string {
	var b strings.Builder
	b.WriteString(p.String())
	b.WriteString(": ")
	if in != "" {
		b.WriteString(in + ": ")
	}
	b.WriteString(msg)
	return b.String()
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// Syntax is where a yaml.v3 decode error points, the first "line N" it names (column 1:
// yaml.v3 gives none), and its message without the "yaml: " prefix and, when it starts so,
// without that "line N: ".
func Syntax(file string, err error) (Pos, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Pos{File: file}
	if m := lineRE.FindStringSubmatchIndex(msg); m != nil {
		p.Line, _ = strconv.Atoi(msg[m[2]:m[3]])
		p.Col = 1
		if m[0] == 0 {
			msg = strings.TrimPrefix(msg[m[1]:], ": ")
		}
	}
	return p, msg
}

// Kind is what a node is: a mapping, a list, a scalar, an alias, or nothing.
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// Describe is Kind with a scalar spelled out: a string quoted, null as nothing, any other
// scalar as written.
func Describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return Kind(n)
	}
	switch n.Tag {
	case "!!str":
		return strconv.Quote(n.Value)
	case "!!null":
		return "nothing"
	}
	return n.Value
}
