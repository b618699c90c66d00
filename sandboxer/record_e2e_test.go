package sandboxer_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// berm run's status tells a tool that died of SIGKILL (137, whoever sent it) from a call berm
// ended (its own status per end reason); the record keeps what became of the tool either way.
func TestTheExitStatusSaysWhetherBermEndedTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		id     string
		args   []string
		reason event.EndReason
		status int
	}{
		{"a tool that kills itself with SIGKILL exits 137", "exitstatus-kill-self", []string{"--", "sh", "-c", "kill -KILL $$"}, event.EndSignal, 128 + 9},
		{"a call berm ends on its wall cap exits with the timeout's status", "exitstatus-wall-cap", []string{"--timeout", "1s", "--", "sleep", "60"}, event.EndTimeout, event.StatusTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			r, rec := runRecord(t, state, append([]string{"--no-rules", "--call-id", tc.id, "--workspace", bermbin.Workspace(t)}, tc.args...)...)
			if r.Exit != tc.status || rec.ExitStatus != tc.status {
				t.Errorf("exit %d, record's exit_status %d; want %d\nstderr: %s", r.Exit, rec.ExitStatus, tc.status, r.Stderr)
			}
			if rec.EndReason != tc.reason || rec.ExitSignal != 9 {
				t.Errorf("record: end_reason %s, exit_signal %d; want %s and the tool's SIGKILL", rec.EndReason, rec.ExitSignal, tc.reason)
			}
		})
	}
}

// berm run --messages takes berm's own lines (here: how the call ended) off the tool's
// stderr, to a file or an inherited descriptor, with the agent embedded and through bermd;
// the tool cannot write to that descriptor.
func TestBermsMessagesGoToTheirOwnChannel(t *testing.T) {
	bermbin.RequireRoot(t)
	d := bermbin.StartDaemon(t)
	const script = "echo TOOL-ERR >&2; { echo HOSTILE >&3; } 2>/dev/null; sleep 60"
	for _, tc := range []struct {
		name, id string
		fd       bool     // --messages 3, an inherited descriptor; else a file
		via      []string // how the call is run
	}{
		{"a file, the agent embedded", "msgs-embedded-file", false, []string{"--state-dir", t.TempDir()}},
		{"a descriptor, the agent embedded", "msgs-embedded-fd", true, []string{"--state-dir", t.TempDir()}},
		{"a file, through bermd", "msgs-bermd-file", false, []string{"--daemon", "required", "--socket", d.Socket}},
		{"a descriptor, through bermd", "msgs-bermd-fd", true, []string{"--daemon", "required", "--socket", d.Socket}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := filepath.Join(t.TempDir(), "messages")
			f, err := os.Create(msgs)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			args := append([]string{"run", "--call-id", tc.id, "--no-rules", "--timeout", "1s", "--workspace", bermbin.Workspace(t)}, tc.via...)
			if tc.fd {
				args = append(args, "--messages", "3")
			} else {
				args = append(args, "--messages", msgs)
			}
			cmd := exec.Command(bermbin.Path(t, "berm"), append(args, "--", "sh", "-c", script)...)
			if tc.fd {
				cmd.ExtraFiles = []*os.File{f}
			}
			r := bermbin.Run(t, cmd)
			if r.Exit != event.StatusTimeout {
				t.Fatalf("exit %d, want the timeout's %d\nstderr: %s", r.Exit, event.StatusTimeout, r.Stderr)
			}
			if r.Stderr != "TOOL-ERR\n" {
				t.Errorf("the tool's stderr holds %q, want only the tool's own TOOL-ERR line", r.Stderr)
			}
			got, err := os.ReadFile(msgs)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), "berm: call "+tc.id+" ended: timeout") || strings.Contains(string(got), "HOSTILE") || strings.Contains(string(got), "TOOL-ERR") {
				t.Errorf("messages hold %q, want berm's end line and nothing of the tool's", got)
			}
		})
	}
}

// An exec event's effective ids are the kernel's, in the host's user namespace: the tool runs
// as its own uid inside its sandbox, which is its call's own host uid, never 0.
func TestExecEventsCarryTheEffectiveIdsTheKernelSees(t *testing.T) {
	bermbin.RequireRoot(t)
	state := t.TempDir()
	r := run(t, state, "--call-id", "exec-euid", "--workspace", bermbin.Workspace(t), "--", "sh", "-c", "id -u; id -g")
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	ids := strings.Fields(r.Stdout)
	if len(ids) != 2 {
		t.Fatalf("id printed %q", r.Stdout)
	}
	var seen bool
	for _, e := range bermbin.Timeline(t, state, "exec-euid").Events {
		if e.Exec == nil || e.Exec.ExeName != "id" {
			continue
		}
		seen = true
		if e.Exec.EUID == 0 || e.Exec.EGID == 0 || e.Exec.EUID != e.UID {
			t.Errorf("id's exec: euid %d, egid %d, real uid %d; the tool runs as %s:%s in its sandbox, want its host uid and gid (not 0), euid the real uid", e.Exec.EUID, e.Exec.EGID, e.UID, ids[0], ids[1])
		}
	}
	if !seen {
		t.Fatal("no exec event of id in the timeline")
	}
}

// berm timeline --follow prints a running call's events while it runs and returns once the
// call has ended, with its record; --all adds berm's own set-up, hidden by default.
func TestTimelineFollowPrintsARunningCallUntilItEnds(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	const id = "timeline-follow"
	berm := bermbin.Path(t, "berm")
	call := exec.Command(berm, "run", "--state-dir", state, "--no-rules", "--call-id", id, "--workspace", ws, "--",
		"sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.1; done; cat /etc/hostname >/dev/null")
	done := bermbin.Start(t, call)
	bermbin.WaitFile(t, call, filepath.Join(ws, "started"))

	follow := func(t *testing.T, extra ...string) (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(berm, append([]string{"timeline", "--state-dir", state, "--follow", "--json", id}, extra...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		return cmd, sc
	}
	type line struct {
		event.Event
		Call *struct {
			Record *event.CallRecord `json:"record"`
		} `json:"call"`
	}
	read := func(t *testing.T, sc *bufio.Scanner) (line, bool) {
		if !sc.Scan() {
			return line{}, false
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a line of --follow --json: %v\n%s", err, sc.Bytes())
		}
		return l, true
	}

	cmd, sc := follow(t)
	// While the call waits for its go file, its events so far come: touch's exec among them.
	var last uint64
	for sawTouch := false; !sawTouch; {
		l, ok := read(t, sc)
		if !ok {
			t.Fatal("berm timeline --follow ended while the call still ran")
		}
		if l.Call != nil {
			t.Fatalf("the call's record came while it still ran: %+v", l.Call.Record)
		}
		last = l.Seq
		sawTouch = l.Exec != nil && l.Exec.ExeName == "touch"
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var sawCat bool
	var end *event.CallRecord
	for {
		l, ok := read(t, sc)
		if !ok {
			break
		}
		if l.Call != nil {
			end = l.Call.Record
			continue
		}
		if l.Seq <= last || l.Phase == event.PhaseSetup {
			t.Errorf("event %d (phase %q) after %d: out of order, repeated or set-up", l.Seq, l.Phase, last)
		}
		last = l.Seq
		sawCat = sawCat || l.Exec != nil && l.Exec.ExeName == "cat"
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("berm timeline --follow: %v", err)
	}
	if r := <-done; r.Exit != 0 {
		t.Fatalf("the call: exit %d: %s", r.Exit, r.Stderr)
	}
	if !sawCat || end == nil || end.EndReason != event.EndExit {
		t.Fatalf("followed to the end: cat's exec seen %v, record %+v", sawCat, end)
	}

	// --all: the set-up events too, here of the ended call (it returns at once).
	cmd, sc = follow(t, "--all")
	var setup int
	for {
		l, ok := read(t, sc)
		if !ok {
			break
		}
		if l.Phase == event.PhaseSetup {
			setup++
		}
	}
	if err := cmd.Wait(); err != nil || setup == 0 {
		t.Fatalf("berm timeline --follow --all: %v, %d set-up events", err, setup)
	}
}
