// Package yamlerr is how berm reports a problem in a YAML file it reads (policies, rules):
// where it is, file:line:col, what it is in (a field, a rule), and what is wrong. One format,
// so that an editor or a reader finds the place the same way whichever file it was.
package yamlerr

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

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

// Syntax is where a yaml.v3 decode error of data points, and its message without the
// "yaml: " prefix and, when it starts so, without that "line N: ". The place is the first
// "line N" the message names (column 1: yaml.v3 gives none). A message that names no line is
// either about a byte YAML refuses (invalid UTF-8, a control character: yaml.v3's reader
// places those nowhere), found here in data, or about the first line, which yaml.v3 leaves
// unnumbered; either way the error has a line and a column an editor can go to.
func Syntax(file string, data []byte, err error) (Pos, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Pos{File: file, Line: 1, Col: 1}
	if m := lineRE.FindStringSubmatchIndex(msg); m != nil {
		if n, aerr := strconv.Atoi(msg[m[2]:m[3]]); aerr == nil && n > 0 {
			p.Line = n
		}
		if m[0] == 0 {
			msg = strings.TrimPrefix(msg[m[1]:], ": ")
		}
		return p, msg
	}
	if line, col, ok := refused(data); ok {
		p.Line, p.Col = line, col
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

// refused is the line and column (in characters, as yaml.v3 counts them) of the first byte
// of data YAML does not read: invalid UTF-8, or a character outside YAML's printable set.
func refused(data []byte) (line, col int, ok bool) {
	line, col = 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 || !printable(r, i) {
			return line, col, true
		}
		switch {
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
			// one break, counted at its \n
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			line, col = line+1, 1 // YAML's line breaks
		default:
			col++
		}
		i += size
	}
	return 0, 0, false
}

// printable is YAML 1.2's c-printable (a byte order mark only at the start).
func printable(r rune, at int) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7e || r == 0x85:
		return true
	case r == 0xfeff:
		return at == 0
	case r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff:
		return true
	}
	return false
}
