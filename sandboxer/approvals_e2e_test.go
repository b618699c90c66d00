package sandboxer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// approvals is one test's approval API: its own socket directory and token file, passed to
// the embedded `berm run` and used by the test as a person would use `berm approve`.
type approvals struct {
	env    []string
	client *approval.Client
}

func newApprovals(t testing.TB) approvals {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	tok, err := approval.LoadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	api := filepath.Join(dir, "api")
	return approvals{
		env:    []string{"BERM_APPROVALS_DIR=" + api, "BERM_APPROVALS_TOKEN=" + tokenFile},
		client: &approval.Client{Dir: api, Token: tok},
	}
}

// pending waits until a request of call is pending and returns the call's pending requests.
func (a approvals) pending(t *testing.T, call string, done chan bermbin.Result) ([]approval.PendingView, bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		list, err := a.client.List()
		if err != nil {
			t.Fatal(err)
		}
		var mine []approval.PendingView
		for _, p := range list {
			if p.CallID == call {
				mine = append(mine, p)
			}
		}
		if len(mine) > 0 {
			return mine, true
		}
		select {
		case r := <-done:
			// The call ended: its result goes back for the caller's next read.
			done <- r
			return nil, false
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no approval request of call %s in 60 s", call)
	return nil, false
}

// startRun starts `berm run` (embedded) and returns its result when it ends.
func startRun(t testing.TB, env []string, args ...string) chan bermbin.Result {
	t.Helper()
	cmd := exec.Command(bermbin.Path(t, "berm"), append([]string{"run", "--no-rules"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return bermbin.Start(t, cmd)
}

const approvalPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-e2e}
spec:
  resources: {wallTime: %s}
  approvals:
    timeout: %s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
        approvers: [tester]
`

func writeApprovalPolicy(t *testing.T, wall, timeout string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "approvals.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(approvalPolicy, wall, timeout)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// reportsWorkspace is a workspace with reports/{a,b,sub/c} and keep.
func reportsWorkspace(t *testing.T) (string, []string) {
	t.Helper()
	ws := bermbin.Workspace(t)
	files := []string{"reports/a", "reports/b", "reports/sub/c"}
	os.MkdirAll(filepath.Join(ws, "reports", "sub"), 0o755)
	for _, f := range append(files, "keep") {
		os.WriteFile(filepath.Join(ws, f), []byte(f), 0o644)
	}
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	return ws, files
}

func approvalEvents(evs []event.Event) []*event.Approval {
	var out []*event.Approval
	for _, e := range evs {
		if e.Approval != nil {
			out = append(out, e.Approval)
		}
	}
	return out
}

// `rm -rf reports` under a rule is held: nothing is deleted while its requests wait. A deny
// leaves every file; an approval of each request removes them; no answer denies at the
// timeout. The trail has each request and decision: outcome, by whom, channel, reason.
func TestApprovalRmRfHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		timeout string
		decide  string // approve, deny, or "" (never answer)
	}{
		{"deny", "60s", "deny"},
		{"approve", "60s", "approve"},
		{"timeout", "1s", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApprovals(t)
			state := t.TempDir()
			ws, files := reportsWorkspace(t)
			call := "rmrf-" + tc.name
			done := startRun(t, a.env, "--state-dir", state, "--call-id", call, "--workspace", ws,
				"--policy", writeApprovalPolicy(t, "2m", tc.timeout), "--", "sh", "-c", "rm -rf reports; echo rm=$?; rm keep; echo keep=$?")
			asked := 0
			for {
				p, ok := a.pending(t, call, done)
				if !ok {
					break
				}
				asked++
				if p[0].Tenant != "default" || p[0].Rule != "delete-reports" || p[0].Action != "unlink" || !strings.HasPrefix(p[0].Object, ws+"/reports") {
					t.Fatalf("pending request: %+v", p[0])
				}
				// Held: the object is still there while its request waits.
				if _, err := os.Lstat(p[0].Object); err != nil {
					t.Fatalf("%s is gone while its request waits: %v", p[0].Object, err)
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
			if asked == 0 {
				t.Fatal("no request was held")
			}
			for _, f := range files {
				_, err := os.Stat(filepath.Join(ws, f))
				if tc.decide == "approve" && err == nil {
					t.Errorf("%s survives its approval", f)
				}
				if tc.decide != "approve" && err != nil {
					t.Errorf("%s lost without an approval: %v", f, err)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "keep")); err == nil {
				t.Error("keep (no rule) was not removed: ungated deletes must go through")
			}
			if tc.decide == "approve" {
				if _, err := os.Stat(filepath.Join(ws, "reports")); err == nil {
					t.Error("reports survives its approval")
				}
			}
			tl := bermbin.Timeline(t, state, call)
			evs := approvalEvents(tl.Events)
			want := map[string]string{"approve": approval.Approved, "deny": approval.Denied, "": approval.Timeout}[tc.decide]
			requested, decided := 0, 0
			for _, e := range evs {
				switch e.Outcome {
				case "requested":
					requested++
				case want:
					decided++
					if tc.decide != "" && (e.By != "tester" || e.Channel != approval.ChannelAPI || e.Reason != "e2e "+tc.decide || e.LatencyNs <= 0) {
						t.Errorf("decision event: %+v", e)
					}
					if tc.decide == "" && (e.Channel != approval.ChannelBroker || e.By != "") {
						t.Errorf("timeout event: %+v", e)
					}
					if e.Rule != "delete-reports" || len(e.Approvers) != 1 || e.Approvers[0] != "tester" {
						t.Errorf("decision event's rule: %+v", e)
					}
				}
			}
			if requested == 0 || requested != decided {
				t.Errorf("%d requests, %d %s decisions in the trail: %+v", requested, decided, want, evs)
			}
			if got := tl.Call.Record.Denials[event.SurfaceApproval]; (tc.decide == "approve") != (got == 0) {
				t.Errorf("approval-surface denials in the record: %d", got)
			}
			for _, e := range tl.Events {
				if d := e.Denial; d != nil && d.Layer == event.LayerLandlock && strings.Contains(d.Rule, "relative") {
					t.Errorf("an approval refusal was named a Landlock denial: %+v", d)
				}
			}
		})
	}
}

// A tool that asks again for an action just denied gets an immediate deny and an alert.
func TestApprovalRepeatDeniedAtOnce(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "repeat", "--workspace", ws,
		"--policy", writeApprovalPolicy(t, "2m", "60s"), "--", "sh", "-c", "rm -f reports/a; rm -f reports/a; rm -f reports/a; echo done")
	p, ok := a.pending(t, "repeat", done)
	if !ok {
		t.Fatal("call ended without a request")
	}
	if err := a.client.Decide(p[0].ID, false, "tester", "no"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !strings.Contains(r.Stdout, "done") {
		t.Fatalf("the call did not go on after its denies: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/a")); err != nil {
		t.Fatal(err)
	}
	tl := bermbin.Timeline(t, state, "repeat")
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
	if strings.Join(outcomes, ",") != "requested,denied,repeat,repeat" || alerts != 2 {
		t.Fatalf("outcomes %v, %d retry alerts", outcomes, alerts)
	}
}

// "Just denied" is a window (spec.approvals.retryWindow): a repeat inside it is denied at
// once; past it the same action reaches a person again.
func TestApprovalRepeatWindow(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	pol := filepath.Join(t.TempDir(), "window.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-window}
spec:
  approvals:
    timeout: 60s
    retryWindow: 2s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "window", "--workspace", ws, "--policy", pol, "--",
		"sh", "-c", "rm -f reports/a; rm -f reports/a; sleep 3; rm -f reports/a; echo done")
	for i := 0; i < 2; i++ {
		p, ok := a.pending(t, "window", done)
		if !ok {
			t.Fatalf("the call ended before request %d", i+1)
		}
		if err := a.client.Decide(p[0].ID, false, "tester", "no"); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if !strings.Contains(r.Stdout, "done") {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/a")); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range approvalEvents(bermbin.Timeline(t, state, "window").Events) {
		outcomes = append(outcomes, e.Outcome)
		if e.Outcome == approval.Repeated && !strings.Contains(e.Reason, "retry window 2s") {
			t.Errorf("repeat's reason: %q", e.Reason)
		}
	}
	if strings.Join(outcomes, ",") != "requested,denied,repeat,requested,denied" {
		t.Fatalf("outcomes %v", outcomes)
	}
}

// A call killed by its wall-time cap while its request waits: the request ends with the call
// (outcome ended, saying why), nothing is deleted, the call's end reason is the cap, and the
// request is no longer pending.
func TestApprovalWallTimeWhileHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, files := reportsWorkspace(t)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "walltime", "--workspace", ws,
		"--policy", writeApprovalPolicy(t, "3s", "60s"), "--", "rm", "-rf", "reports")
	if _, ok := a.pending(t, "walltime", done); !ok {
		t.Fatal("call ended without a request")
	}
	r := <-done
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("%s lost: %v", f, err)
		}
	}
	if list, _ := a.client.List(); len(list) != 0 {
		t.Errorf("still pending after the call: %+v", list)
	}
	tl := bermbin.Timeline(t, state, "walltime")
	if tl.Call.Record.EndReason != event.EndTimeout {
		t.Fatalf("end reason %q (exit %d: %s)", tl.Call.Record.EndReason, r.Exit, r.Stderr)
	}
	var ended *event.Approval
	for _, e := range approvalEvents(tl.Events) {
		if e.Outcome == approval.Ended {
			ended = e
		}
	}
	if ended == nil || !strings.Contains(ended.Reason, "wall-time") {
		t.Fatalf("no ended request naming the cap: %+v", approvalEvents(tl.Events))
	}
}

// The hostile tool: one thread unlinks reports/a and, while that request waits, another
// rewrites the path buffer to reports/b. The person approves what they were shown
// (reports/a): only reports/a goes. With SECCOMP_USER_NOTIF_FLAG_CONTINUE the kernel would
// read the buffer again and delete reports/b, which nobody approved.
func TestApprovalPathRewriteWhileHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	script := `
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(b"reports/a", 64)
def rewrite():
    time.sleep(0.3)
    while not stop:
        ctypes.memmove(buf, b"reports/b\0", 10)
        time.sleep(0.001)
stop = False
t = threading.Thread(target=rewrite); t.start()
rc = libc.unlink(buf)
print("unlink", rc, ctypes.get_errno(), buf.value, flush=True)
stop = True; t.join()
`
	os.WriteFile(filepath.Join(ws, "race.py"), []byte(script), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "rewrite", "--workspace", ws,
		"--policy", writeApprovalPolicy(t, "2m", "60s"), "--", "python3", "race.py")
	p, ok := a.pending(t, "rewrite", done)
	if !ok {
		r := <-done
		t.Fatalf("call ended without a request: %+v", r)
	}
	if p[0].Object != ws+"/reports/a" {
		t.Fatalf("the request shows %s", p[0].Object)
	}
	time.Sleep(time.Second) // the rewriting thread has been at it for a while
	if err := a.client.Decide(p[0].ID, true, "tester", "a only"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	t.Logf("%s %s", r.Stdout, r.Stderr)
	if !strings.Contains(r.Stdout, "b'reports/b'") {
		t.Fatalf("the buffer was not rewritten while held: %q", r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/a")); err == nil {
		t.Error("reports/a, approved, is still there")
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/b")); err != nil {
		t.Errorf("reports/b, never approved, was deleted: %v", err)
	}
}

// A planted symbolic link cannot make the supervisor act outside the call's root: it walks
// paths from the tool's root as the tool's ids. The link points at a host directory (mode
// 0777, so the host's permissions would not stop an unlink there) that the call's root does
// not have: the unlink fails inside the call and the host file survives.
func TestApprovalPlantedSymlinkStaysInRoot(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	host := filepath.Join(t.TempDir(), "host-victims")
	os.MkdirAll(host, 0o777)
	os.Chmod(host, 0o777)
	for _, d := range []string{filepath.Dir(host), filepath.Dir(filepath.Dir(host))} {
		os.Chmod(d, 0o755)
	}
	victim := filepath.Join(host, "victim")
	os.WriteFile(victim, []byte("host"), 0o666)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "symlink", "--workspace", ws,
		"--policy", writeApprovalPolicy(t, "2m", "60s"), "--",
		"sh", "-c", "ln -s "+host+" reports/link && rm -f reports/link/victim; echo rm=$?; rm keep")
	// The unlink of reports/link/victim resolves, in the call's root, to a directory that is
	// not there: it fails before any request (nothing to ask about).
	for {
		p, ok := a.pending(t, "symlink", done)
		if !ok {
			break
		}
		t.Errorf("unexpected request: %+v", p[0])
		a.client.Decide(p[0].ID, true, "tester", "")
	}
	r := <-done
	t.Logf("%s %s", r.Stdout, r.Stderr)
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the host file behind the planted link was deleted: %v", err)
	}
	if !strings.Contains(r.Stdout, "rm=0") && !strings.Contains(r.Stdout, "rm=1") {
		t.Fatalf("rm did not run: %q", r.Stdout)
	}
}

// A write rule holds opens for writing under its glob; the supervisor opens the approved file
// itself, as the tool (its umask, its ids through the idmapped workspace) and hands the
// descriptor back (ADDFD): the shell's redirection writes through it. Reads are not held.
func TestApprovalWriteHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws := bermbin.Workspace(t)
	os.MkdirAll(filepath.Join(ws, "out"), 0o755)
	os.WriteFile(filepath.Join(ws, "out", "existing"), []byte("old\n"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	pol := filepath.Join(t.TempDir(), "w.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-write}
spec:
  approvals:
    timeout: 60s
    rules:
      - name: results
        match: {write: "${WORKSPACE}/out/**"}
`), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "write", "--workspace", ws, "--policy", pol, "--",
		"sh", "-c", "cat out/existing; echo new > out/approved; echo w1=$?; echo bad > out/existing; echo w2=$?; echo free > notgated; echo w3=$?; cat out/approved; "+
			// A second name outside the glob would let the file be written unasked.
			"ln out/existing alias; echo l=$?; mv out/existing moved; echo m=$?")
	decisions := []bool{true, false, false, false}
	var objects []string
	for i := 0; ; i++ {
		p, ok := a.pending(t, "write", done)
		if !ok {
			break
		}
		if i >= len(decisions) {
			t.Fatalf("unexpected request %+v", p[0])
		}
		objects = append(objects, p[0].Object)
		a.client.Decide(p[0].ID, decisions[i], "tester", "")
	}
	r := <-done
	t.Logf("%s %s", r.Stdout, r.Stderr)
	if strings.Join(objects, ",") != ws+"/out/approved,"+ws+"/out/existing,"+ws+"/out/existing => "+ws+"/alias,"+ws+"/out/existing -> "+ws+"/moved" {
		t.Fatalf("requests for %v", objects)
	}
	if !strings.Contains(r.Stdout, "l=1") || !strings.Contains(r.Stdout, "m=1") {
		t.Fatalf("a link or rename of the gated file went through: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "old\n") || !strings.Contains(r.Stdout, "w1=0") || !strings.Contains(r.Stdout, "w2=") || strings.Contains(r.Stdout, "w2=0") || !strings.Contains(r.Stdout, "w3=0") {
		t.Fatalf("output %q", r.Stdout)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "out", "approved")); string(data) != "new\n" {
		t.Fatalf("approved file holds %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "out", "existing")); string(data) != "old\n" {
		t.Fatalf("denied overwrite: existing holds %q", data)
	}
	st, err := os.Stat(filepath.Join(ws, "out", "approved"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 65534 || st.Mode().Perm() != 0o644 {
		t.Errorf("approved file: owner %d mode %v, want the workspace owner and the tool's umask", sys.Uid, st.Mode().Perm())
	}
}

// A connect rule: the supervisor connects the tool's own socket to the address it copied. The
// bpf-cgroup-sock egress layer still judges that connect as the call's: an address the policy
// does not allow stays refused though the supervisor made the call.
func TestApprovalConnectHeld(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws := bermbin.Workspace(t)
	gated, free, closed := listen(t, "tcp", "127.0.0.1:0"), listen(t, "tcp", "127.0.0.1:0"), listen(t, "tcp", "127.0.0.1:0")
	pol := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-connect}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {cidr: 127.0.0.1/32, ports: [%d, %d], protocol: tcp}
  approvals:
    timeout: 60s
    rules:
      - name: payments
        match: {connect: "127.0.0.1/32:%d"}
`, port(gated), port(free), port(gated))), 0o644)
	script := `import socket, sys
def tcp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.connect(("127.0.0.1", port)); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
    finally:
        s.close()
g, f, c = [int(x) for x in sys.argv[1:4]]
print("free", tcp(f), flush=True)
print("closed", tcp(c), flush=True)
print("gated1", tcp(g), flush=True)
print("gated2", tcp(g), flush=True)
`
	os.WriteFile(filepath.Join(ws, "c.py"), []byte(script), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "connect", "--workspace", ws, "--policy", pol, "--",
		"python3", "c.py", strconv.Itoa(port(gated)), strconv.Itoa(port(free)), strconv.Itoa(port(closed)))
	decisions := []bool{true, false}
	for i := 0; ; i++ {
		p, ok := a.pending(t, "connect", done)
		if !ok {
			break
		}
		if i >= len(decisions) || p[0].Object != fmt.Sprintf("127.0.0.1:%d", port(gated)) || p[0].Action != "connect" {
			t.Fatalf("unexpected request %+v", p[0])
		}
		a.client.Decide(p[0].ID, decisions[i], "tester", "")
	}
	r := <-done
	for _, want := range []string{"free ok", "closed errno1", "gated1 ok", "gated2 errno1"} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("missing %q in %q (%s)", want, r.Stdout, r.Stderr)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if gated.accepted.Load() != 1 || free.accepted.Load() != 1 || closed.accepted.Load() != 0 {
		t.Errorf("accepted: gated %d free %d closed %d", gated.accepted.Load(), free.accepted.Load(), closed.accepted.Load())
	}
}

// count: one approval covers that many actions of its rule; the next one is asked again.
func TestApprovalCountCovers(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	pol := filepath.Join(t.TempDir(), "count.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-count}
spec:
  approvals:
    timeout: 60s
    rules:
      - name: two-at-a-time
        match: {unlink: "${WORKSPACE}/reports/**"}
        count: 2
`), 0o644)
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "count", "--workspace", ws, "--policy", pol, "--",
		"sh", "-c", "rm reports/a; rm reports/b; rm reports/sub/c; echo c=$?")
	for _, approve := range []bool{true, false} {
		p, ok := a.pending(t, "count", done)
		if !ok {
			t.Fatal("the call ended before its second request")
		}
		a.client.Decide(p[0].ID, approve, "tester", "")
	}
	if p, ok := a.pending(t, "count", done); ok {
		t.Fatalf("a third request: %+v", p[0])
	}
	r := <-done
	if !strings.Contains(r.Stdout, "c=1") {
		t.Fatalf("%q %q", r.Stdout, r.Stderr)
	}
	for f, gone := range map[string]bool{"reports/a": true, "reports/b": true, "reports/sub/c": false} {
		if _, err := os.Stat(filepath.Join(ws, f)); (err != nil) != gone {
			t.Errorf("%s gone %v, want %v", f, err != nil, gone)
		}
	}
	var outcomes []string
	for _, e := range approvalEvents(bermbin.Timeline(t, state, "count").Events) {
		outcomes = append(outcomes, e.Outcome)
	}
	if strings.Join(outcomes, ",") != "requested,approved,covered,requested,denied" {
		t.Fatalf("outcomes %v", outcomes)
	}
}

// The embedded run posts each request to --approval-webhook, signed with the key file: a
// loopback receiver checks the signature over timestamp "." body and decides through the API
// (as a chat bot would), and the held delete happens.
func TestApprovalEmbeddedWebhook(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	secret := "0123456789abcdef0123456789abcdef"
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte(secret+"\n"), 0o600)
	type got struct {
		body    approval.WebhookBody
		sigOK   bool
		decided error
	}
	seen := make(chan got, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var g got
		g.sigOK = r.Header.Get("X-Berm-Signature") == approval.Signature([]byte(secret), r.Header.Get("X-Berm-Timestamp"), raw)
		if err := json.Unmarshal(raw, &g.body); err != nil {
			g.decided = err
		} else if g.sigOK {
			g.decided = a.client.Decide(g.body.Request.ID, true, "tester", "approved by the bot")
		}
		seen <- g
	}))
	defer srv.Close()
	done := startRun(t, a.env, "--state-dir", state, "--call-id", "webhook", "--workspace", ws,
		"--policy", writeApprovalPolicy(t, "2m", "60s"), "--approval-webhook", srv.URL+"/hook", "--approval-webhook-secret", secretFile,
		"--", "sh", "-c", "rm reports/a; echo rm=$?")
	var g got
	select {
	case g = <-seen:
	case r := <-done:
		t.Fatalf("the call ended before the webhook was called: %+v", r)
	case <-time.After(60 * time.Second):
		t.Fatal("no webhook request in 60 s")
	}
	r := <-done
	if !g.sigOK || g.decided != nil || g.body.Type != "approval.request" || g.body.Request.CallID != "webhook" || g.body.Request.Object != ws+"/reports/a" {
		t.Fatalf("webhook: %+v", g)
	}
	if !strings.Contains(r.Stdout, "rm=0") {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/a")); err == nil {
		t.Fatal("reports/a survives the bot's approval")
	}
}
