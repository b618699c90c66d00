package policy

import (
	"strings"

	"github.com/bermsec/berm/agent/policy/yamlerr"
)

// Error is one problem in a policy file, located precisely (printed as yamlerr formats it).
type Error struct {
	File  string
	Line  int
	Col   int
	Field string // spec.resources.memory, spec.filesystem.write[2], ...
	Msg   string
}

func (e *Error) Error() string {
	return yamlerr.Format(yamlerr.Pos{File: e.File, Line: e.Line, Col: e.Col}, e.Field, e.Msg)
}

// syntaxError is a yaml.v3 decode error of data as a policy Error.
func syntaxError(file string, data []byte, err error) *Error {
	p, msg := yamlerr.Syntax(file, data, err)
	return &Error{File: file, Line: p.Line, Col: p.Col, Msg: "invalid yaml: " + msg}
}

// Errors is every problem found in one file; Load and Parse return it so callers can list
// them all (errors.As) instead of fixing one per run.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.Is/As see each error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
