package audit_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/tetragon/api/v1/tetragon"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// eventLines reads berm events' JSON lines, each a whole event of the schema.
func eventLines(t *testing.T, out string) []event.Event {
	t.Helper()
	var evs []event.Event
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		var e event.Event
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line %d is not an event: %v\n%s", i+1, err, l)
		}
		evs = append(evs, e)
	}
	return evs
}

// A real call's events, read back as berm events writes them: one JSON object a line, berm's
// set-up hidden as in berm timeline, the filters selecting what they name, and Tetragon's
// format parsing into Tetragon's own type with its process tree intact.
func TestEventsOfARealCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--call-id", "ev1", "--workspace", ws, "--",
		"sh", "-c", "cat /etc/hostname >/dev/null; cat /etc/shadow 2>/dev/null; exit 0")
	if r.Exit != 0 {
		t.Fatalf("berm run: exit %d\n%s", r.Exit, r.Stderr)
	}

	all := bermbin.Berm(t, nil, "events", "--state-dir", state)
	if all.Exit != 0 || all.Stderr != "" {
		t.Fatalf("berm events: exit %d: %s", all.Exit, all.Stderr)
	}
	evs := eventLines(t, all.Stdout)
	var sawCat, sawDenial bool
	last := map[string]uint64{}
	for _, e := range evs {
		if e.CallID != "ev1" || e.CallKey == "" || e.Tenant == "" {
			t.Errorf("event %s does not name its call: %+v", e.ID(), e)
		}
		if e.Phase == event.PhaseSetup {
			t.Errorf("berm's set-up shown without --all: %s", e.ID())
		}
		if e.Seq <= last[e.CallKey] {
			t.Errorf("seq %d after %d", e.Seq, last[e.CallKey])
		}
		last[e.CallKey] = e.Seq
		sawCat = sawCat || (e.Exec != nil && strings.HasSuffix(e.Exec.Filename, "cat"))
		sawDenial = sawDenial || (e.Denial != nil && e.Denial.Object == "/etc/shadow")
	}
	if !sawCat || !sawDenial {
		t.Fatalf("the exec of cat (%v) and the denial of /etc/shadow (%v) are not both there:\n%s", sawCat, sawDenial, all.Stdout)
	}
	withSetup := eventLines(t, bermbin.Berm(t, nil, "events", "--state-dir", state, "--all").Stdout)
	if len(withSetup) <= len(evs) {
		t.Errorf("--all shows %d events, no more than the %d without it", len(withSetup), len(evs))
	}

	for _, tc := range []struct {
		name string
		args []string
		keep func(event.Event) bool
	}{
		{"only denials", []string{"--kind", "denial"}, func(e event.Event) bool { return e.Kind == event.KindDenial }},
		{"execs and exits", []string{"--kind", "exec,exit"}, func(e event.Event) bool { return e.Kind == event.KindExec || e.Kind == event.KindExit }},
		{"the call by its id", []string{"--call", "ev1"}, func(event.Event) bool { return true }},
		{"another call", []string{"--call", "no-such-call"}, func(event.Event) bool { return false }},
		{"another tenant", []string{"--tenant", "no-such-tenant"}, func(event.Event) bool { return false }},
		{"since an hour", []string{"--since", "1h"}, func(event.Event) bool { return true }},
		{"since a minute ahead", []string{"--since", time.Now().Add(time.Minute).Format(time.RFC3339)}, func(event.Event) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bermbin.Berm(t, nil, append([]string{"events", "--state-dir", state}, tc.args...)...)
			if r.Exit != 0 {
				t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
			}
			got := eventLines(t, r.Stdout)
			want := 0
			for _, e := range evs {
				if tc.keep(e) {
					want++
				}
			}
			if len(got) != want {
				t.Fatalf("%d events, want %d", len(got), want)
			}
			for _, e := range got {
				if !tc.keep(e) {
					t.Errorf("event %s (%s) passed the filter", e.ID(), e.Kind)
				}
			}
		})
	}

	for _, bad := range [][]string{{"--kind", "nope"}, {"--format", "xml"}, {"--since", "yesterday"}, {"stray"}} {
		if r := bermbin.Berm(t, nil, append([]string{"events", "--state-dir", state}, bad...)...); r.Exit == 0 || !strings.HasPrefix(r.Stderr, "berm: ") || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("berm events %v: exit %d, stderr %q: want one line naming the error", bad, r.Exit, r.Stderr)
		}
	}
	if r := bermbin.Berm(t, nil, "events", "-h"); r.Exit != 0 || !strings.Contains(r.Stdout, "--format") {
		t.Errorf("berm events -h: exit %d, stdout %q", r.Exit, r.Stdout)
	}

	tet := bermbin.Berm(t, nil, "events", "--state-dir", state, "--format", "tetragon", "--node", "node-a")
	if tet.Exit != 0 {
		t.Fatalf("--format tetragon: exit %d: %s", tet.Exit, tet.Stderr)
	}
	execIDs := map[string]string{}
	var catParent, shID string
	var lsm int
	for i, l := range strings.Split(strings.TrimSuffix(tet.Stdout, "\n"), "\n") {
		var resp tetragon.GetEventsResponse
		if err := (protojson.UnmarshalOptions{}).Unmarshal([]byte(l), &resp); err != nil {
			t.Fatalf("line %d is not a Tetragon GetEventsResponse: %v\n%s", i+1, err, l)
		}
		if resp.NodeName != "node-a" {
			t.Errorf("line %d: node_name %q", i+1, resp.NodeName)
		}
		if x := resp.GetProcessExec(); x != nil {
			p := x.Process
			if p.Pod.GetNamespace() == "" || p.Pod.GetName() != "ev1" {
				t.Errorf("exec of %s: pod %v does not carry the call", p.Binary, p.Pod)
			}
			execIDs[p.ExecId] = p.Binary
			if strings.HasSuffix(p.Binary, "/cat") && strings.Contains(p.Arguments, "shadow") {
				catParent = p.ParentExecId
			}
			if strings.Contains(p.Arguments, "/etc/shadow") && !strings.HasSuffix(p.Binary, "/cat") {
				shID = p.ExecId
			}
		}
		if resp.GetProcessLsm() != nil {
			lsm++
		}
	}
	if shID == "" || catParent != shID {
		t.Errorf("cat's parent_exec_id %q is not the shell's exec_id %q (execs: %v)", catParent, shID, execIDs)
	}
	if lsm == 0 {
		t.Error("no process_lsm for the denial")
	}
}

// berm events --follow gives a call's events while the call is written, and a reader that
// goes away (| head -1) ends berm events quietly: no error on stderr, the pipe's own end.
func TestEventsFollowAndAClosedPipe(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	// Enough events that berm events cannot have written them all into the pipe's buffer
	// before its reader goes away.
	if r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--call-id", "first", "--workspace", ws, "--",
		"sh", "-c", "for i in $(seq 1500); do : > f$i; done"); r.Exit != 0 {
		t.Fatalf("berm run: exit %d\n%s", r.Exit, r.Stderr)
	}
	if n := len(bermbin.Berm(t, nil, "events", "--state-dir", state, "--all").Stdout); n < 256<<10 {
		t.Fatalf("the call's events are %d bytes: too few to fill a pipe", n)
	}
	follow := exec.Command(bermbin.Path(t, "berm"), "events", "--state-dir", state, "--follow", "--kind", "exec")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	follow.Stderr = &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(call string) {
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("berm events --follow ended: %s", stderr.String())
				}
				if strings.Contains(l, `"call_id":"`+call+`"`) {
					return
				}
			case <-deadline:
				t.Fatalf("no exec of call %s followed in 60 s", call)
			}
		}
	}
	wait("first")
	if r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--call-id", "second", "--workspace", ws, "--", "true"); r.Exit != 0 {
		t.Fatalf("berm run: exit %d\n%s", r.Exit, r.Stderr)
	}
	wait("second")
	follow.Process.Signal(syscall.SIGTERM)
	if err := follow.Wait(); err != nil {
		t.Errorf("berm events --follow after SIGTERM: %v: %s", err, stderr.String())
	}

	// | head -1: the reader takes one line and closes its end.
	head := exec.Command(bermbin.Path(t, "berm"), "events", "--state-dir", state, "--all")
	pipe, err := head.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var headErr strings.Builder
	head.Stderr = &headErr
	if err := head.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(pipe).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pipe.Close()
	err = head.Wait()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGPIPE) {
		t.Errorf("berm events into a closed pipe: %v (want exit 0 or SIGPIPE's own end)", err)
	}
	if headErr.Len() != 0 {
		t.Errorf("berm events into a closed pipe wrote to stderr: %q", headErr.String())
	}
}
