package rules

import (
	"fmt"
)

// TestResult is the outcome of one embedded test case of a rule.
type TestResult struct {
	Rule  string
	File  string
	Line  int  // the case's line
	Match bool // the case must raise the rule's alert (false: must not)
	Fired int  // alerts the rule raised over the case's events
	Err   string
}

func (t TestResult) Failed() bool { return t.Err != "" }

func (t TestResult) String() string {
	want := "match"
	if !t.Match {
		want = "nomatch"
	}
	status := "ok"
	if t.Failed() {
		status = "FAIL"
	}
	s := fmt.Sprintf("%s %s:%d: rule %q: %s", status, t.File, t.Line, t.Rule, want)
	if t.Failed() {
		s += ": " + t.Err
	}
	return s
}

// RunTests runs every rule's embedded test cases, each case from a fresh state with only its
// rule active, disabled rules included.
func (s *Set) RunTests() []TestResult {
	var out []TestResult
	for _, r := range s.rules {
		for _, tc := range r.tests {
			out = append(out, runCase(r, tc))
		}
	}
	return out
}

func runCase(r *Rule, tc testCase) TestResult {
	res := TestResult{Rule: r.ID, File: r.File, Line: tc.line, Match: tc.match}
	one := *r
	one.Enabled = true
	set := &Set{rules: []*Rule{&one}}
	set.reindex()
	eng := NewEngine(set, nil)
	for i := range tc.events {
		ev := &tc.events[i]
		for _, a := range eng.Eval(ev) {
			res.Fired++
			if a.Alert.EventSeq != ev.Seq || a.CallID != ev.CallID {
				res.Err = fmt.Sprintf("alert does not point at its event: %+v", a.Alert)
			}
			eng.mu.Lock()
			eng.act.ev = ev
			_, err := one.renderErr(&eng.act)
			eng.act.ev = nil
			eng.mu.Unlock()
			if err != nil && res.Err == "" {
				res.Err = fmt.Sprintf("output: %v", err)
			}
		}
	}
	switch {
	case res.Err != "":
	case tc.match && res.Fired == 0:
		res.Err = fmt.Sprintf("no alert over %d event(s)", len(tc.events))
	case !tc.match && res.Fired > 0:
		res.Err = fmt.Sprintf("%d alert(s), want none", res.Fired)
	}
	return res
}
