package secrets

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCompilePattern: a compiled pattern is the hand-built one's equal (same expression, same
// anchors, same redactions), compiled once per process, and a bad expression is an error naming it.
func TestCompilePattern(t *testing.T) {
	for _, tc := range []struct {
		name, re, end, err string
	}{
		{name: "aws-access-key-id", re: `\b(AKIA|ASIA)[0-9A-Z]{16}\b`},
		{name: "private-key", re: `-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`, end: `-----END [A-Z0-9 ]*PRIVATE KEY-----`},
		{name: "bad", re: `(unclosed`, err: `regex "(unclosed": error parsing regexp: missing closing ): ` + "`(unclosed`"},
		{name: "bad end", re: `BEGIN`, end: `[z-a]`, err: `end "[z-a]": error parsing regexp: invalid character class range: ` + "`z-a`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := CompilePattern(tc.name, tc.re, tc.end)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			again, _ := CompilePattern("other name", tc.re, tc.end)
			if again.Regex != p.Regex || again.End != p.End || again.Name != "other name" {
				t.Errorf("compiled again: %p %p %q, first %p %p", again.Regex, again.End, again.Name, p.Regex, p.End)
			}
			if p.Regex.String() != tc.re || (tc.end == "") != (p.End == nil) || !p.probed {
				t.Errorf("pattern %+v", p)
			}
			if want := anchorsOf(tc.re); !slices.EqualFunc(p.anchors, want, func(a, b anchor) bool { return string(a.lit) == string(b.lit) && a.fold == b.fold }) {
				t.Errorf("anchors %v, want %v", p.anchors, want)
			}
			byHand := Pattern{Name: tc.name, Regex: regexp.MustCompile(tc.re)}
			if tc.end != "" {
				byHand.End = regexp.MustCompile(tc.end)
			}
			text := "x AKIAABCDEFGHIJKLMNOP y\n-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\nz\n"
			got, _ := redactAll(t, [][]byte{[]byte(text)}, []Pattern{p})
			want, _ := redactAll(t, [][]byte{[]byte(text)}, []Pattern{byHand})
			if got != want || !strings.Contains(got, "[berm:redacted:"+tc.name+"]") {
				t.Errorf("redacted %q, by hand %q", got, want)
			}
		})
	}
}
