package rules

import (
	"fmt"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/policy/yamlerr"
)

// Issue is one problem found while loading rule files, at a position in a file.
type Issue struct {
	File string
	Line int
	Col  int
	Rule string // the rule's id, when the problem is inside a rule
	Msg  string
}

func (i Issue) String() string {
	in := ""
	if i.Rule != "" {
		in = fmt.Sprintf("rule %q", i.Rule)
	}
	return yamlerr.Format(yamlerr.Pos{File: i.File, Line: i.Line, Col: i.Col}, in, i.Msg)
}

// LoadError lists every problem of a load; a set with problems is never used.
type LoadError struct {
	Issues []Issue
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		lines[i] = is.String()
	}
	return strings.Join(lines, "\n")
}

// source is one rule file's text, kept to map expression offsets back to file positions.
type source struct {
	name  string
	lines [][]rune
}

func newSource(name string, data []byte) *source {
	s := &source{name: name}
	for _, l := range strings.Split(string(data), "\n") {
		s.lines = append(s.lines, []rune(l))
	}
	return s
}

// text is an expression or template read from a YAML scalar, with where it came from.
type text struct {
	src  *source
	node *yaml.Node
	s    string
}

// pos maps a rune offset in t.s to a file line and column (1-based). YAML folding, quoting and
// escapes mean the text is not a verbatim slice of the file, so the text's characters are
// aligned with the file's by searching forward for each non-space one.
func (t text) pos(offset int) (int, int) {
	n := t.node
	line, col := n.Line-1, n.Column-1
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		line, col = line+1, 0
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		col++
	}
	runes := []rune(t.s)
	if offset > len(runes) {
		offset = len(runes)
	}
	for i := 0; i <= offset && i < len(runes); i++ {
		c := runes[i]
		if unicode.IsSpace(c) {
			if i == offset {
				return line + 1, col + 1
			}
			continue
		}
		l, k, ok := t.find(c, line, col)
		if !ok {
			return n.Line, n.Column
		}
		line, col = l, k
		if i == offset {
			return line + 1, col + 1
		}
		col++
	}
	return line + 1, col + 1
}

func (t text) find(c rune, line, col int) (int, int, bool) {
	for l := line; l < len(t.src.lines) && l < line+200; l++ {
		start := 0
		if l == line {
			start = col
		}
		rs := t.src.lines[l]
		for k := start; k < len(rs); k++ {
			if rs[k] == c {
				return l, k, true
			}
		}
	}
	return 0, 0, false
}
