package sandboxer_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// touch stands in for psql: a real program of the call's root whose argv says what it does
// (the file it creates is the test's evidence that it ran). mkdir is a second gated program.
const execPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-exec}
spec:
  resources: {wallTime: 2m}
  approvals:
    timeout: %s
    rules:
      - name: run-touch
        match: {exec: /usr/bin/touch, argv: "(?i)drop|delete|truncate"}
      - name: run-mkdir
        match: {exec: /usr/bin/mkdir, argv: "(?i)drop"}
`

func writeExecPolicy(t *testing.T, timeout string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "exec.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(execPolicy, "%s", timeout, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// execDenials are the exec hook's kills in a trail.
func execDenials(evs []event.Event) []*event.Denial {
	var out []*event.Denial
	for _, e := range evs {
		if d := e.Denial; d != nil && d.Layer == event.LayerApproval && strings.HasPrefix(d.Rule, "spec.approvals exec:") {
			out = append(out, d)
		}
	}
	return out
}

// execveatScript runs touch by a directory descriptor and a relative name (execveat); the
// strict policy refuses fexecve (AT_EMPTY_PATH) on its own.
const execveatScript = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.system("touch keep-1")
d = os.open("/usr/bin", os.O_RDONLY | os.O_DIRECTORY)
argv = (ctypes.c_char_p * 3)(b"touch", b"drop-fd", None)
envp = (ctypes.c_char_p * 1)(None)
libc.syscall(322, d, b"touch", argv, envp, 0)
print("execveat", ctypes.get_errno(), flush=True)
`

// A held exec of a gated program whose argv matches the rule: approved it runs, denied or
// unanswered it does not. The same program with other argv runs unasked (the kernel's exec
// hook lets it: the supervisor's entry matches what runs), and so do ungated programs (sh,
// /bin/true): one request in all. execveat (fexecve of an open file) is held the same way.
func TestApprovalExecHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, tc := range []struct {
		name, timeout, decide string
		argv                  []string
		marker                string
	}{
		{"approve", "60s", "approve", []string{"sh", "-c", "touch keep-1; echo keep=$?; touch drop-1; echo drop=$?; /bin/true; echo true=$?"}, "drop-1"},
		{"deny", "60s", "deny", []string{"sh", "-c", "touch keep-1; echo keep=$?; touch drop-1; echo drop=$?; /bin/true; echo true=$?"}, "drop-1"},
		{"timeout", "1s", "", []string{"sh", "-c", "touch keep-1; echo keep=$?; touch drop-1; echo drop=$?; /bin/true; echo true=$?"}, "drop-1"},
		{"execveat-approve", "60s", "approve", []string{"python3", "-c", execveatScript}, "drop-fd"},
		{"execveat-deny", "60s", "deny", []string{"python3", "-c", execveatScript}, "drop-fd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApprovals(t)
			state := t.TempDir()
			ws := bermbin.Workspace(t)
			os.Chown(ws, 65534, 65534)
			call := "exec-" + tc.name
			done := startRun(t, a.env, append([]string{"--state-dir", state, "--call-id", call, "--workspace", ws,
				"--policy", writeExecPolicy(t, tc.timeout), "--"}, tc.argv...)...)
			asked := map[string]bool{}
			for {
				p, ok := a.pending(t, call, done)
				if !ok {
					break
				}
				asked[p[0].ID] = true
				want := "/usr/bin/touch " + tc.marker
				if p[0].Action != "exec" || p[0].Rule != "run-touch" || p[0].Object != want {
					t.Fatalf("pending request: %+v, want object %q", p[0], want)
				}
				if _, err := os.Stat(filepath.Join(ws, tc.marker)); err == nil {
					t.Fatal("the held exec ran before its decision")
				}
				if tc.decide == "" {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err := a.client.Decide(p[0].ID, tc.decide == "approve", "tester", "e2e "+tc.decide); err != nil {
					t.Fatal(err)
				}
			}
			r := <-done
			t.Logf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
			if len(asked) != 1 {
				t.Fatalf("%d requests, want 1 (only the matching argv of a gated program is asked about)", len(asked))
			}
			if _, err := os.Stat(filepath.Join(ws, "keep-1")); err != nil {
				t.Errorf("the gated program with unmatched argv did not run: %v", err)
			}
			_, err := os.Stat(filepath.Join(ws, tc.marker))
			if ran := err == nil; ran != (tc.decide == "approve") {
				t.Errorf("%s ran: %v, decision %q", tc.marker, ran, tc.decide)
			}
			if strings.HasPrefix(tc.argv[0], "sh") && !strings.Contains(r.Stdout, "true=0") {
				t.Errorf("the ungated /bin/true did not run: %q", r.Stdout)
			}
			tl := bermbin.Timeline(t, state, call)
			if d := execDenials(tl.Events); len(d) != 0 {
				t.Errorf("the exec hook killed an exec decided on: %+v", d[0])
			}
			want := map[string]string{"approve": approval.Approved, "deny": approval.Denied, "": approval.Timeout}[tc.decide]
			var outcomes []string
			for _, e := range approvalEvents(tl.Events) {
				outcomes = append(outcomes, e.Outcome)
				if e.Action != "exec" || e.Rule != "run-touch" {
					t.Errorf("approval event: %+v", e)
				}
			}
			// A shell that is refused tries the next directory of its PATH (/bin/touch, the
			// same file): the same action, denied at once, no repeat (pathsearch.go).
			if !regexp.MustCompile("^requested," + want + "(,same-action)*$").MatchString(strings.Join(outcomes, ",")) {
				t.Errorf("outcomes %v", outcomes)
			}
			if got := tl.Call.Record.Denials[event.SurfaceApproval]; (tc.decide == "approve") != (got == 0) {
				t.Errorf("approval-surface denials in the record: %d", got)
			}
		})
	}
}

// The hostile tool: one thread execs touch drop-a and, while the request waits, another
// rewrites the argv string (drop-b) or the path (/usr/bin/mkdir, gated too). The person
// approves what they were shown; the kernel copies the rewritten memory after CONTINUE, and
// the exec hook kills the exec before it runs: neither drop-a nor drop-b is created.
func TestApprovalExecRewriteKilled(t *testing.T) {
	bermbin.RequireRoot(t)
	script := `
import ctypes, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
path = ctypes.create_string_buffer(b"/usr/bin/touch", 64)
a0 = ctypes.create_string_buffer(b"touch", 16)
a1 = ctypes.create_string_buffer(b"drop-a", 16)
argv = (ctypes.c_void_p * 3)(ctypes.addressof(a0), ctypes.addressof(a1), None)
what = sys.argv[1]
def rewrite():
    time.sleep(0.3)
    while True:
        if what == "argv":
            ctypes.memmove(a1, b"drop-b\0", 7)
        else:
            ctypes.memmove(path, b"/usr/bin/mkdir\0", 15)
        time.sleep(0.001)
threading.Thread(target=rewrite, daemon=True).start()
print("exec", flush=True)
libc.execv(path, argv)
print("execv failed", ctypes.get_errno(), flush=True)
`
	for _, what := range []string{"argv", "path"} {
		t.Run(what, func(t *testing.T) {
			a := newApprovals(t)
			state := t.TempDir()
			ws := bermbin.Workspace(t)
			os.Chown(ws, 65534, 65534)
			os.WriteFile(filepath.Join(ws, "race.py"), []byte(script), 0o644)
			call := "exec-rewrite-" + what
			done := startRun(t, a.env, "--state-dir", state, "--call-id", call, "--workspace", ws,
				"--policy", writeExecPolicy(t, "60s"), "--", "python3", "race.py", what)
			p, ok := a.pending(t, call, done)
			if !ok {
				r := <-done
				t.Fatalf("call ended without a request: %+v", r)
			}
			if p[0].Object != "/usr/bin/touch drop-a" {
				t.Fatalf("the request shows %q", p[0].Object)
			}
			time.Sleep(time.Second) // the rewriting thread has been at it for a while
			if err := a.client.Decide(p[0].ID, true, "tester", "drop-a only"); err != nil {
				t.Fatal(err)
			}
			r := <-done
			t.Logf("exit %d: %q %q", r.Exit, r.Stdout, r.Stderr)
			for _, f := range []string{"drop-a", "drop-b"} {
				if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
					t.Errorf("%s exists: the rewritten exec ran", f)
				}
			}
			if r.Exit == 0 || strings.Contains(r.Stdout, "execv failed") {
				t.Errorf("the exec was not killed: exit %d %q", r.Exit, r.Stdout)
			}
			tl := bermbin.Timeline(t, state, call)
			d := execDenials(tl.Events)
			wantWhy := map[string]string{"argv": "argv executed is not", "path": "file executed is not"}[what]
			if len(d) != 1 || !strings.Contains(d[0].Rule, wantWhy) {
				t.Fatalf("exec hook denials %+v, want one saying %q", d, wantWhy)
			}
			if tl.Call.Record.Denials[event.SurfaceApproval] == 0 {
				t.Error("no approval-surface denial in the record")
			}
		})
	}
}

// The hostile tool without a decision: a thread flips the exec's path between an ungated
// program (/usr/bin/true) and a gated one (/usr/bin/touch, argv matching) as fast as it can,
// while the exec is held, read and continued, 150 times. Whatever the supervisor read, the
// gated program never runs unasked: read as true it continues with no entry, and if the
// kernel then finds touch the exec hook kills it (no decision); read as touch it is asked
// (1s timeout: denied) or denied at once as a repeat. How often each happened is the race's
// luck, logged; that touch never ran is the test.
func TestApprovalExecSwapAfterReadNeverRunsUnasked(t *testing.T) {
	bermbin.RequireRoot(t)
	script := `
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
kills = ok = refused = 0
for i in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        path = ctypes.create_string_buffer(b"/usr/bin/true", 32)
        a0 = ctypes.create_string_buffer(b"x", 4)
        a1 = ctypes.create_string_buffer(b"drop-swap", 16)
        argv = (ctypes.c_void_p * 3)(ctypes.addressof(a0), ctypes.addressof(a1), None)
        def flip():
            while True:
                ctypes.memmove(path, b"/usr/bin/touch\0", 15)
                ctypes.memmove(path, b"/usr/bin/true\0\0", 15)
        threading.Thread(target=flip, daemon=True).start()
        libc.execv(path, argv)
        os._exit(126)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9:
        kills += 1
    elif os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0:
        ok += 1
    else:
        refused += 1
print(f"kills={kills} ok={ok} refused={refused}", flush=True)
`
	a := newApprovals(t)
	state := t.TempDir()
	ws := bermbin.Workspace(t)
	os.Chown(ws, 65534, 65534)
	os.WriteFile(filepath.Join(ws, "swap.py"), []byte(script), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "exec-swap", "--workspace", ws,
		"--policy", writeExecPolicy(t, "1s"), "--", "python3", "swap.py", "150")
	r := <-done
	t.Logf("exit %d: %q", r.Exit, r.Stdout)
	if !strings.Contains(r.Stdout, "kills=") {
		t.Fatalf("the script did not finish: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "drop-swap")); err == nil {
		t.Fatal("touch drop-swap ran without a decision")
	}
	tl := bermbin.Timeline(t, state, "exec-swap")
	noDecision := 0
	for _, d := range execDenials(tl.Events) {
		if strings.Contains(d.Rule, "no decision") {
			noDecision++
		}
	}
	var kills int
	for _, f := range strings.Fields(r.Stdout) {
		if v, ok := strings.CutPrefix(f, "kills="); ok {
			kills, _ = strconv.Atoi(v)
		}
	}
	t.Logf("exec hook kills for want of a decision: %d in the trail, %d seen by the script", noDecision, kills)
	if kills != noDecision {
		t.Errorf("%d kills, %d exec-hook denials in the trail", kills, noDecision)
	}
}

// The hostile tool runs the gated program through its dynamic loader (ld.so PROGRAM ARGS):
// the kernel would execute the loader, another file. The loaders of gated programs are gated
// too, with no rule: run directly they are refused, with a denial, and nobody is asked.
func TestApprovalExecThroughTheLoaderRefused(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws := bermbin.Workspace(t)
	os.Chown(ws, 65534, 65534)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "exec-loader", "--workspace", ws,
		"--policy", writeExecPolicy(t, "60s"), "--", "sh", "-c", "/lib64/ld-linux-x86-64.so.2 /usr/bin/touch drop-ld; echo ld=$?; touch keep-1; echo keep=$?")
	r := <-done
	t.Logf("exit %d: %q %q", r.Exit, r.Stdout, r.Stderr)
	if _, err := os.Stat(filepath.Join(ws, "drop-ld")); err == nil {
		t.Fatal("touch drop-ld ran through the loader unasked")
	}
	if strings.Contains(r.Stdout, "ld=0") || !strings.Contains(r.Stdout, "keep=0") {
		t.Fatalf("%q", r.Stdout)
	}
	tl := bermbin.Timeline(t, state, "exec-loader")
	if ev := approvalEvents(tl.Events); len(ev) != 0 {
		t.Errorf("asked about the loader: %+v", ev[0])
	}
	found := false
	for _, d := range execDenials(tl.Events) {
		found = found || (strings.Contains(d.Rule, "dynamic loader") && strings.Contains(d.Object, "/usr/bin/touch drop-ld"))
	}
	if !found {
		t.Errorf("no loader denial in the trail: %+v", execDenials(tl.Events))
	}
}

// A shell refused /usr/bin/touch tries the next directory of its PATH (/bin/touch: the same
// file on merged /usr): that is the same action, denied at once with no new request and no
// retry alert. A real repeat still alerts: the shell's next command (a new child asking
// again) and a loop retrying the same path in one thread.
func TestApprovalExecPathSearchIsNotARetry(t *testing.T) {
	bermbin.RequireRoot(t)
	loop := `import os
for i in range(2):
    try:
        os.execv("/usr/bin/touch", ["touch", "drop-1"])
    except OSError as e:
        print("refused", e.errno, flush=True)
`
	for _, tc := range []struct {
		name     string
		argv     []string
		outcomes string // the approval events, in order
		alerts   int
	}{
		// dash (sh) searches PATH: /usr/bin/touch, then /bin/touch, which is the same file.
		{"path-search", []string{"sh", "-c", "touch drop-1; echo drop=$?"}, "^requested,denied(,same-action)+$", 0},
		{"next-command", []string{"sh", "-c", "touch drop-1; touch drop-1; echo drop=$?"}, "^requested,denied(,same-action)+,repeat(,same-action)+$", 1},
		{"same-path-loop", []string{"python3", "-c", loop}, "^requested,denied,repeat$", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApprovals(t)
			state := t.TempDir()
			ws := bermbin.Workspace(t)
			os.Chown(ws, 65534, 65534)
			call := "exec-search-" + tc.name
			done := startRun(t, a.env, append([]string{"--state-dir", state, "--call-id", call, "--workspace", ws,
				"--policy", writeExecPolicy(t, "60s"), "--"}, tc.argv...)...)
			asked := 0
			for {
				p, ok := a.pending(t, call, done)
				if !ok {
					break
				}
				asked++
				if err := a.client.Decide(p[0].ID, false, "tester", "no"); err != nil {
					t.Fatal(err)
				}
			}
			r := <-done
			t.Logf("exit %d: %q %q", r.Exit, r.Stdout, r.Stderr)
			if asked != 1 {
				t.Errorf("%d requests, want 1", asked)
			}
			if _, err := os.Stat(filepath.Join(ws, "drop-1")); err == nil {
				t.Error("the denied exec ran")
			}
			tl := bermbin.Timeline(t, state, call)
			var outcomes []string
			alerts := 0
			for _, e := range tl.Events {
				if e.Approval != nil {
					outcomes = append(outcomes, e.Approval.Outcome)
				}
				if e.Alert != nil && e.Alert.RuleID == "approval-retry" {
					alerts++
				}
			}
			if !regexp.MustCompile(tc.outcomes).MatchString(strings.Join(outcomes, ",")) || alerts != tc.alerts {
				t.Errorf("outcomes %v with %d retry alerts; want %s with %d", outcomes, alerts, tc.outcomes, tc.alerts)
			}
			if d := execDenials(tl.Events); len(d) != 0 {
				t.Errorf("the exec hook killed an exec: %+v", d[0])
			}
		})
	}
}
