package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// FuzzLoad: a rule file of any bytes (its YAML, its lists and macros, its CEL conditions,
// outputs, windows, sequences and test events) loads to a set or to a LoadError, never a
// panic; every issue names the file and, where it has a place, a line and column inside it;
// a set that loads runs its own embedded tests and evaluates events without a panic, and
// loading the same bytes again gives the same rules.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		goodRule,
		"lists:\n  l: [a, b]\n  n: [1, 2]\nmacros:\n  m: syscall.name in l\n" + strings.Replace(goodRule, `syscall.name == "mount"`, `m && syscall.path.startsWith("/")`, 1),
		strings.Replace(goodRule, "    output:", "    window: {count: 3, within: 10s, by: proc.exe}\n    output:", 1),
		strings.Replace(goodRule, "    output:", "    sequence: {first: 'exec.path == \"/bin/sh\"', within: 1m}\n    output:", 1),
		strings.Replace(goodRule, "    output:", "    exceptions: [{name: e, condition: 'proc.uid == 0'}]\n    output:", 1),
		strings.Replace(goodRule, `syscall.name == "mount"`, `syscall.path.matches("(a+)+$") && 1/0 == 1`, 1),
		strings.Replace(goodRule, `syscall.name == "mount"`, strings.Repeat("(", 300)+"true"+strings.Repeat(")", 300), 1),
		strings.Replace(goodRule, `syscall.name == "mount"`, "syscall.name == \"\xff\x00\"", 1),
		strings.Replace(goodRule, "mount ${syscall.path}", "${${}}${", 1),
		"macros:\n  a: b\n  b: a\n" + goodRule,
		"rules: [\n",
		"rules:\n  - &r {id: x}\n  - *r\n",
		"lists:\n  a: &a [x, x]\n  b: [*a, *a]\n",
		"",
		"\x01",
		"rules: {}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		s, err := load(name, data)
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) {
				if strings.HasPrefix(err.Error(), "rules: cel environment: ") {
					return // a list whose name CEL refuses: said so, as a whole
				}
				t.Fatalf("error %T %q is neither a LoadError nor the CEL environment's", err, err)
			}
			lines := yamlLines(data)
			for _, is := range le.Issues {
				if is.File != name || is.Msg == "" || is.Line < 0 || is.Line > lines+1 || (is.Line > 0 && is.Col < 1) {
					t.Fatalf("issue not placed in the file of %d lines: %+v", lines, is)
				}
			}
			return
		}
		for _, r := range s.RunTests() {
			if r.File != name || r.Line < 1 {
				t.Fatalf("test result without its place: %+v", r)
			}
		}
		e := NewEngine(s, nil)
		for _, ev := range fuzzEvents {
			ev := ev
			e.Eval(&ev)
		}
		s2, err := load(name, data)
		if err != nil {
			t.Fatalf("loaded once, then failed: %v", err)
		}
		if s.Len() != s2.Len() {
			t.Fatalf("the same bytes loaded %d rules, then %d", s.Len(), s2.Len())
		}
	})
}

// load is LoadFiles of one file's bytes.
func load(name string, data []byte) (*Set, error) {
	l := &loader{}
	l.parse(newSource(name, data), data)
	return l.compile([]string{name})
}

var fuzzEvents = []event.Event{
	{Kind: event.KindSyscall, Syscall: &event.Syscall{Name: "mount", Path: "/mnt"}},
	{Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/sh", Argv: []string{"sh", "-c", "id"}}},
	{Kind: event.KindOpen, Open: &event.Open{Path: "/etc/shadow", Result: -13, Errno: "EACCES"}},
	{Kind: event.KindSyscall},
}

// yamlLines bounds the lines YAML counts in data: \n, \r, NEL, LS and PS each break a line
// (\r\n counts twice here: a bound, not the count).
func yamlLines(data []byte) int {
	n := 1
	for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		n += strings.Count(string(data), br)
	}
	return n
}
