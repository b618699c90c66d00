package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

func TestMeasure(t *testing.T) {
	b := behaviour{Technique: "T1070.003", Number: 1, GUID: "abcdef0123", Name: "x"}
	for _, c := range []struct {
		name   string
		exit   int
		events []event.Event
		ran    bool
		denied int
		alerts []string
	}{
		{"nothing found", 127, []event.Event{{Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/sh"}}}, false, 0, nil},
		{"a program ran", 0, []event.Event{{Kind: event.KindExec, Exec: &event.Exec{}}, {Kind: event.KindExec, Exec: &event.Exec{}}}, true, 0, nil},
		{"denied and alerted", 127, []event.Event{
			{Kind: event.KindDenial, Denial: &event.Denial{}},
			{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "b"}},
			{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "a"}},
			{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "a"}},
		}, true, 1, []string{"a", "b"}},
		{"the harness's wall-time cap is not an alert", 0, []event.Event{
			{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "resource-wall-time"}},
		}, true, 0, nil},
		{"setup's exec is not the tool's", 127, []event.Event{
			{Kind: event.KindExec, UID: 0, Comm: "berm", Exec: &event.Exec{}},
			{Kind: event.KindExec, UID: 1000, Comm: "sh", Exec: &event.Exec{}},
		}, false, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := &timeline{Events: c.events}
			tl.Call.Record.ExitCode = c.exit
			o := measure(b, "id", false, tl, nil)
			if o.Ran != c.ran || o.Denied != c.denied || strings.Join(o.Alerts, ",") != strings.Join(c.alerts, ",") {
				t.Errorf("got ran=%v denied=%d alerts=%v, want ran=%v denied=%d alerts=%v", o.Ran, o.Denied, o.Alerts, c.ran, c.denied, c.alerts)
			}
		})
	}
}

func TestReportCountsOnlyWhatRan(t *testing.T) {
	res := []outcome{
		{ID: "a", Technique: "T1", Ran: true, Alerts: []string{"r"}},
		{ID: "b", Technique: "T1", Ran: true, Denied: 2},
		{ID: "c", Technique: "T2", Ran: false, Alerts: []string{"r"}},
		{ID: "d", Technique: "benign", Benign: true, Ran: true, Alerts: []string{"r"}},
	}
	var out, md bytes.Buffer
	report(&out, &md, res)
	for _, want := range []string{
		"attack corpus: 3 behaviours in 2 techniques; 2 ran; contained (denied) 1; alerted 1 of those that ran (50.0%)",
		"benign corpus: 1 behaviours; 1 ran; 0 denied; false positives 1",
		"FALSE POSITIVE d",
		"no alert: b",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// The committed corpus is what extract.py writes: every test keeps its file, number, GUID
// and ATT&CK id, and has a command.
func TestCorpusFiles(t *testing.T) {
	for _, f := range []string{"atomics.json", "benign.json"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c corpusFile
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Tests) < 10 {
			t.Fatalf("%s: %d tests", f, len(c.Tests))
		}
		seen := map[string]bool{}
		for _, b := range c.Tests {
			if b.Command == "" {
				t.Errorf("%s: %q has no command", f, b.Name)
			}
			if f == "atomics.json" {
				if b.File == "" || b.Number < 1 || len(b.GUID) != 36 || !strings.HasPrefix(b.Technique, "T") || seen[b.GUID] {
					t.Errorf("atomic %+v: file, number, unique GUID and technique required", b)
				}
				seen[b.GUID] = true
			}
		}
	}
}
