package sandboxer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// runRecord runs a call with the shipped rules and returns its record (--summary).
func runRecord(t *testing.T, state string, args ...string) (bermbin.Result, event.CallRecord) {
	t.Helper()
	summary := filepath.Join(t.TempDir(), "record.json")
	r := bermbin.Berm(t, nil, append([]string{"run", "--state-dir", state, "--summary", summary}, args...)...)
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatalf("no record (exit %d, stderr %s): %v", r.Exit, r.Stderr, err)
	}
	var rec event.CallRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("record: %v\n%s", err, b)
	}
	return r, rec
}

// A call that trips rules lists each alert in its record: the rule, its severity and title,
// the alert's place in the trail and the event that tripped it; a call that trips more than
// the record's bound lists that many and counts the rest, never claiming more than it lists.
func TestTheRecordListsTheCallsAlerts(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		id      string
		times   int
		listed  int
		omitted uint64
	}{
		{"two alerts are both listed", "record-alerts-two", 2, 2, 0},
		{"alerts past the bound are counted, not listed", "record-alerts-past-bound", event.MaxRecordAlerts + 6, event.MaxRecordAlerts - 4, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			id := tc.id
			r, rec := runRecord(t, state, "--call-id", id, "--workspace", bermbin.Workspace(t), "--",
				"sh", "-c", "i=0; while [ $i -lt "+itoa(tc.times)+" ]; do getent passwd >/dev/null; i=$((i+1)); done")
			if r.Exit != 0 {
				t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
			}
			var ours []event.AlertRef
			for _, a := range rec.Alerts {
				if a.RuleID == "discovery-users" {
					ours = append(ours, a)
				}
			}
			// Other rules may fire too (repeated denials): the list is the first of them all.
			listed := min(rec.Counts.Alert, event.MaxRecordAlerts)
			if uint64(len(rec.Alerts)) != listed || rec.AlertsOmitted != rec.Counts.Alert-listed {
				t.Fatalf("record lists %d alerts and omits %d of the %d counted; want %d listed, the rest omitted: %+v", len(rec.Alerts), rec.AlertsOmitted, rec.Counts.Alert, listed, rec.Alerts)
			}
			if len(ours) < tc.listed || rec.AlertsOmitted < tc.omitted || (tc.omitted == 0 && len(ours) != tc.times) {
				t.Fatalf("record lists %d discovery-users alerts and omits %d alerts; want at least %d listed, %d omitted", len(ours), rec.AlertsOmitted, tc.listed, tc.omitted)
			}
			bySeq := map[uint64]event.Event{}
			for _, e := range bermbin.Timeline(t, state, id).Events {
				bySeq[e.Seq] = e
			}
			for _, a := range ours {
				if a.Severity != "low" || a.Title == "" || a.Surface == "" {
					t.Errorf("alert %+v: want the rule's severity (low), title and surface", a)
				}
				if e := bySeq[a.Seq]; e.Alert == nil || e.Alert.RuleID != a.RuleID || e.Alert.EventSeq != a.EventSeq {
					t.Errorf("alert %+v: the trail's event %d is %+v", a, a.Seq, e)
				}
				if e := bySeq[a.EventSeq]; e.Exec == nil || e.Exec.ExeName != "getent" {
					t.Errorf("alert %+v: the event that tripped it (%d) is %+v, want getent's exec", a, a.EventSeq, e)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

