package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
)

func TestParseApprovals(t *testing.T) {
	p, err := Parse("p.yaml", []byte(header+`spec:
  approvals:
    timeout: 90s
    retryWindow: 5m
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
      - name: no-overwrite
        match: {write: "${WORKSPACE}/*.csv"}
        count: 3
      - name: payments-api
        match: {connect: "10.20.0.0/16:443"}
        count: 1
        approvers: [payments-oncall]
      - name: any-port
        match: {connect: "[2001:db8::/32]"}
      - name: run-psql
        match: {exec: /usr/bin/psql, argv: "(?i)drop|delete|truncate"}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Spec.Approvals
	if a.Timeout != 90*time.Second || a.RetryWindow != 5*time.Minute || len(a.Rules) != 5 {
		t.Fatalf("%+v", a)
	}
	want := []ApprovalRule{
		{Name: "delete-reports", Action: ApproveUnlink, Glob: "${WORKSPACE}/reports/**", Count: 1},
		{Name: "no-overwrite", Action: ApproveWrite, Glob: "${WORKSPACE}/*.csv", Count: 3},
		{Name: "payments-api", Action: ApproveConnect, CIDR: netip.MustParsePrefix("10.20.0.0/16"), Port: 443, Count: 1, Approvers: []string{"payments-oncall"}},
		{Name: "any-port", Action: ApproveConnect, CIDR: netip.MustParsePrefix("2001:db8::/32"), Count: 1},
		{Name: "run-psql", Action: ApproveExec, Path: "/usr/bin/psql", Argv: regexp.MustCompile("(?i)drop|delete|truncate"), Count: 1},
	}
	for i, w := range want {
		g := a.Rules[i]
		if g.Name != w.Name || g.Action != w.Action || g.Glob != w.Glob || g.CIDR != w.CIDR || g.Port != w.Port || g.Count != w.Count || g.Path != w.Path || fmt.Sprint(g.Argv) != fmt.Sprint(w.Argv) || strings.Join(g.Approvers, ",") != strings.Join(w.Approvers, ",") {
			t.Errorf("rule %d: %+v, want %+v", i, g, w)
		}
	}
	// Left out: no rules, the default timeout when a section is given without one.
	p, err = Parse("p.yaml", []byte(header+"spec:\n  approvals:\n    rules: []\n"))
	if err != nil || p.Spec.Approvals.Timeout != DefaultApprovalTimeout || p.Spec.Approvals.RetryWindow != DefaultRetryWindow {
		t.Fatalf("%v %+v", err, p)
	}
}

func TestParseApprovalErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"two actions", "      - name: x\n        match: {unlink: /a, rename: /b}\n",
			[]string{`p.yaml:9:16: spec.approvals.rules[0].match: expected exactly one of unlink, rename, write, exec, connect, got 2`}},
		{"no action", "      - name: x\n        match: {}\n",
			[]string{`p.yaml:9:16: spec.approvals.rules[0].match: expected exactly one of unlink, rename, write, exec, connect, got 0`}},
		{"relative glob", "      - name: x\n        match: {unlink: reports/**}\n",
			[]string{`p.yaml:9:25: spec.approvals.rules[0].match.unlink: expected an absolute path or one starting with ${WORKSPACE} or ${TMP}, got "reports/**"`}},
		{"partial double star", "      - name: x\n        match: {write: \"${WORKSPACE}/a**\"}\n",
			[]string{`p.yaml:9:24: spec.approvals.rules[0].match.write: expected '**' as a whole name (dir/**), got "${WORKSPACE}/a**"`}},
		{"bad port", "      - name: x\n        match: {connect: \"10.0.0.0/8:99999\"}\n",
			[]string{`p.yaml:9:26: spec.approvals.rules[0].match.connect: expected a CIDR and port like 10.20.0.0/16:443 (port 1-65535), got "10.0.0.0/8:99999"`}},
		{"host bits", "      - name: x\n        match: {connect: \"10.1.2.3/8:443\"}\n",
			[]string{`p.yaml:9:26: spec.approvals.rules[0].match.connect: expected a CIDR without host bits (10.0.0.0/8), got "10.1.2.3/8"`}},
		{"argv without exec", "      - name: x\n        match: {unlink: /a, argv: drop}\n",
			[]string{`p.yaml:9:35: spec.approvals.rules[0].match.argv: argv narrows exec only, got it with unlink`}},
		{"bad regex", "      - name: x\n        match: {exec: /usr/bin/psql, argv: \"(\"}\n",
			[]string{
				"p.yaml:9:44: spec.approvals.rules[0].match.argv: expected a regular expression (RE2 syntax), got \"(\": error parsing regexp: missing closing ): `(`",
			}},
		{"exec placeholder", "      - name: x\n        match: {exec: \"${WORKSPACE}/psql\"}\n",
			[]string{`p.yaml:9:23: spec.approvals.rules[0].match.exec: expected an absolute program path like /usr/bin/psql, got "${WORKSPACE}/psql"`}},
		{"count", "      - name: x\n        match: {unlink: /a}\n        count: 0\n",
			[]string{`p.yaml:10:16: spec.approvals.rules[0].count: expected a positive whole number, got 0`}},
		{"name twice", "      - name: x\n        match: {unlink: /a}\n      - name: x\n        match: {unlink: /b}\n",
			[]string{`p.yaml:10:15: spec.approvals.rules[1].name: rule name "x" used twice`}},
		{"missing match", "      - name: x\n",
			[]string{`p.yaml:8:9: spec.approvals.rules[0].match: required field missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(header+"spec:\n  approvals:\n    rules:\n"+tc.yaml))
			var got []string
			if errs, ok := err.(Errors); ok {
				for _, e := range errs {
					got = append(got, e.Error())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"/ws/reports/**", "/ws/reports", true},
		{"/ws/reports/**", "/ws/reports/a", true},
		{"/ws/reports/**", "/ws/reports/sub/deep/c", true},
		{"/ws/reports/**", "/ws/reportsX/a", false},
		{"/ws/reports/**", "/ws/other/reports/a", false},
		{"/ws/*.csv", "/ws/a.csv", true},
		{"/ws/*.csv", "/ws/sub/a.csv", false},
		{"/ws/**/*.csv", "/ws/sub/deeper/a.csv", true},
		{"/ws/**/*.csv", "/ws/a.csv", true},
		{"/ws/**/*.csv", "/ws/a.txt", false},
		{"/ws/a?", "/ws/ab", true},
		{"/ws/[ab]", "/ws/c", false},
	} {
		if got := MatchGlob(tc.glob, tc.path); got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v", tc.glob, tc.path, got)
		}
	}
}

// A directory is beneath-matched by a glob when something in it could match: it is an
// ancestor of the protected tree (moving or removing it moves or removes what is protected).
func TestMatchGlobBeneath(t *testing.T) {
	for _, tc := range []struct {
		glob, dir string
		want      bool
	}{
		{"/ws/project/.git/**", "/ws/project", true},
		{"/ws/project/.git/**", "/ws", true},
		{"/ws/project/.git/**", "/", true},
		{"/ws/project/.git/**", "/ws/project/.git", true},
		{"/ws/project/.git/**", "/ws/project/.git/objects", true},
		{"/ws/project/.git/**", "/ws/project/src", false},
		{"/ws/project/.git/**", "/ws/projectX", false},
		{"/ws/project/.git/**", "/other", false},
		{"/ws/*/config/**", "/ws/any", true},
		{"/ws/*.csv", "/ws", true},
		{"/ws/*.csv", "/ws/sub", false},
		{"/ws/**/*.csv", "/ws/a/b", true},
		{"/ws/a.csv", "/ws/a.csv", false},
	} {
		if got := MatchGlobBeneath(tc.glob, tc.dir); got != tc.want {
			t.Errorf("MatchGlobBeneath(%q, %q) = %v, want %v", tc.glob, tc.dir, got, tc.want)
		}
	}
}

// The compiled approval filter notifies only the gated syscalls, writes by their flags;
// everything else is allowed in the filter. And the judge leaves the supervisor's EPERM to it.
func TestCompileApprovals(t *testing.T) {
	p, err := Parse("p.yaml", []byte(header+`spec:
  approvals:
    rules:
      - {name: r, match: {unlink: "${WORKSPACE}/reports/**"}}
      - {name: w, match: {write: "${TMP}/out/**"}}
      - {name: x, match: {exec: /usr/bin/psql, argv: drop}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	c, err := p.Compile(CompileEnv{Workspace: ws, Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a := c.Approvals
	if a == nil || len(a.Filter) == 0 || a.Timeout != DefaultApprovalTimeout {
		t.Fatalf("%+v", a)
	}
	if a.Rules[0].Glob != ws+"/reports/**" || a.Rules[1].Glob != "/tmp/out/**" {
		t.Fatalf("globs: %q %q", a.Rules[0].Glob, a.Rules[1].Glob)
	}
	nr := func(n string) uint32 { v, _ := event.SyscallNumber(n); return v }
	for _, tc := range []struct {
		name    string
		refused bool
		ev      event.Event
	}{
		{"unlinkat EPERM", true, event.Event{Syscall: &event.Syscall{Name: "unlinkat", Nr: nr("unlinkat"), Result: -1}}},
		{"unlinkat EACCES", false, event.Event{Syscall: &event.Syscall{Name: "unlinkat", Nr: nr("unlinkat"), Result: -13}}},
		{"write open EPERM", true, event.Event{Open: &event.Open{Flags: 0o1, Result: -1}}},
		{"read open EPERM", false, event.Event{Open: &event.Open{Flags: 0, Result: -1}}},
		{"execve EPERM", true, event.Event{Syscall: &event.Syscall{Name: "execve", Nr: nr("execve"), Result: -1}}},
		{"connect (no rule)", false, event.Event{Syscall: &event.Syscall{Name: "connect", Result: -1}}},
	} {
		if got := a.Refused(&tc.ev); got != tc.refused {
			t.Errorf("%s: Refused = %v", tc.name, got)
		}
	}
	// Audit mode holds nothing.
	p.Spec.Mode = Audit
	if c, err := p.Compile(CompileEnv{Workspace: ws, Tmp: t.TempDir()}); err != nil || c.Approvals != nil {
		t.Fatalf("audit mode: %v %+v", err, c.Approvals)
	}
}
