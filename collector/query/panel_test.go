package query

import (
	"strings"
	"testing"
	"time"
)

// TestBuildEveryType: every query type builds for both dialects, and a value full of quotes
// and backslashes stays inside its literal.
func TestBuildEveryType(t *testing.T) {
	hostile := `x' OR 1=1 -- \' \\`
	for _, d := range []Dialect{Legacy, Modern} {
		for _, qt := range Types() {
			p := Params{Database: "berm", Dialect: d, From: time.Unix(1_700_000_000, 0), To: time.Unix(1_700_003_600, 0),
				Bucket: time.Minute, Tenants: []string{hostile}, Tools: []string{hostile}, Text: hostile, Call: hostile, Field: "call"}
			stmts, err := Build(qt[0], p)
			if err != nil {
				t.Fatalf("%s %s: %v", d, qt[0], err)
			}
			for _, st := range stmts {
				// outside the quoted literals, no part of the value may remain
				if strings.Contains(stripLiterals(st.SQL), "OR 1=1") {
					t.Errorf("%s %s: the value escaped its literal:\n%s", d, qt[0], st.SQL)
				}
			}
		}
	}
	if _, err := Build("nope", Params{}); err == nil {
		t.Error("an unknown type built")
	}
	if _, err := Build("calls", Params{Database: "berm; DROP", Dialect: Legacy, From: time.Unix(1, 0), To: time.Unix(2, 0)}); err == nil {
		t.Error("a database that is not an identifier built")
	}
}

// stripLiterals removes ClickHouse string literals ('...' with backslash escapes).
func stripLiterals(sql string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case in && c == '\\':
			i++
		case c == '\'':
			in = !in
		case !in:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// TestBoundTypes: the approval and DNS types carry every value a panel sends as an argument:
// none of it is in the SQL, even quoted, and each ? has its argument.
func TestBoundTypes(t *testing.T) {
	hostile := `x' OR 1=1 -- \' ?`
	for _, d := range []Dialect{Legacy, Modern} {
		for _, qt := range []string{"approvals", "approval_refusals", "dns", "dns_refusals", "dns_over_time", "dns_alerts"} {
			p := Params{Database: "berm", Dialect: d, From: time.Unix(1_700_000_000, 0), To: time.Unix(1_700_003_600, 0),
				Bucket: time.Minute, Tenants: []string{hostile}, Tools: []string{hostile}, Text: hostile, Call: hostile}
			stmts, err := Build(qt, p)
			if err != nil {
				t.Fatalf("%s %s: %v", d, qt, err)
			}
			for _, st := range stmts {
				if strings.Contains(st.SQL, "1=1") || strings.Count(st.SQL, "?") != len(st.Args) || len(st.Args) < 3 {
					t.Errorf("%s %s: %d args for\n%s", d, qt, len(st.Args), st.SQL)
				}
			}
		}
	}
}
