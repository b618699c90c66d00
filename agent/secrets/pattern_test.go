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

func TestScrubPatternsRedactsEachMatchOfAString(t *testing.T) {
	key, _ := CompilePattern("aws-key", `AKIA[0-9A-Z]{16}`, "")
	pem, _ := CompilePattern("pem", `-----BEGIN [A-Z ]*PRIVATE KEY-----`, `-----END [A-Z ]*PRIVATE KEY-----`)
	empty, _ := CompilePattern("empty", `x*`, `y*`)
	pats := []Pattern{key, pem, empty}
	for _, tc := range []struct {
		name, in, want string
		names          []string
	}{
		{"no match", "/ws/data/cache.tmp", "/ws/data/cache.tmp", nil},
		{"a key in a file name", "/ws/reports/AKIAABCDEFGHIJKLMNOP.txt", "/ws/reports/[berm:redacted:aws-key].txt", []string{"aws-key"}},
		{"two keys, one name", "/ws/AKIAABCDEFGHIJKLMNOP -> /ws/AKIAQQQQQQQQQQQQQQQQ", "/ws/[berm:redacted:aws-key] -> /ws/[berm:redacted:aws-key]", []string{"aws-key"}},
		{"a block to its end", "a -----BEGIN RSA PRIVATE KEY-----MIIE-----END RSA PRIVATE KEY----- b", "a [berm:redacted:pem] b", []string{"pem"}},
		{"a block without its end runs to the end", "a -----BEGIN PRIVATE KEY-----MIIE", "a [berm:redacted:pem]", []string{"pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, names := ScrubPatterns(tc.in, pats)
			if got != tc.want || strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Errorf("ScrubPatterns(%q) = %q %v, want %q %v", tc.in, got, names, tc.want, tc.names)
			}
		})
	}
}
