package main

import (
	"encoding/json"
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

// wedgePolicy gates writes under config/ and deletions under keep/ and flood/.
const wedgePolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-wedge}
spec:
  # The tool makes FIFOs to try to wedge the supervisor: strict refuses them when made.
  filesystem: {allowSpecialFiles: true}
  approvals:
    timeout: 2m
    rules:
      - name: config-writes
        match: {write: "${WORKSPACE}/config/**"}
      - name: keep-deletes
        match: {unlink: "${WORKSPACE}/keep/**"}
      - name: flood-deletes
        match: {unlink: "${WORKSPACE}/flood/**"}
`

// approvalsAPI is a bermd's approval API as the tests use it: berm approvals, approve, deny.
type approvalsAPI struct{ cli []string }

func (a approvalsAPI) list(t *testing.T) []approval.PendingView {
	t.Helper()
	r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, a.cli...)...)
	if r.Exit != 0 {
		t.Fatalf("berm approvals: %s", r.Stderr)
	}
	var out []approval.PendingView
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("berm approvals --json: %v: %s", err, r.Stdout)
	}
	return out
}

// waitFor waits until a pending request satisfies ok, or fails the test when the call ended
// first or none came in 60 s.
func (a approvalsAPI) waitFor(t *testing.T, done chan bermbin.Result, ok func(approval.PendingView) bool) approval.PendingView {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		for _, p := range a.list(t) {
			if ok(p) {
				return p
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the call ended before its request was pending: %+v", r)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("no such request pending in 60 s")
	return approval.PendingView{}
}

// ended waits for a call's end. A call that does not end in 90 s is what this file's tests
// exist to catch (a supervisor wedged, the call's end waiting for it): the test fails, and
// bermd, which holds the caller's output for ever then, is killed so the test can end.
func (d *bermd) ended(t *testing.T, what string, done chan bermbin.Result) bermbin.Result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(90 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("%s: the call did not end in 90 s: the supervisor is wedged", what)
		return bermbin.Result{}
	}
}

func wedgeSetup(t *testing.T) (*bermd, approvalsAPI, string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte(wedgePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return d, approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}, pol
}

// wedgeWorkspace is a workspace the tool (uid 65534) owns, with config/x and keep/x.
func wedgeWorkspace(t *testing.T) string {
	t.Helper()
	ws := bermbin.Workspace(t)
	for _, d := range []string{"config", "keep", "flood"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	os.WriteFile(filepath.Join(ws, "config", "x"), []byte("config"), 0o644)
	os.WriteFile(filepath.Join(ws, "keep", "x"), []byte("keep"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	return ws
}

// A write rule makes bermd perform every write-open of the call. What the tool opens must
// never hold bermd's thread: a FIFO nobody reads (or, opened for reading with O_TRUNC,
// nobody writes) is refused at once, not opened, so the call goes on and ends by itself.
// Before, bermd's thread blocked in the open for ever and the call's end waited for it:
// neither the wall cap nor the caller's signal ended the call.
func TestApprovalSupervisorRefusesFIFOs(t *testing.T) {
	d, _, pol := wedgeSetup(t)
	for i, tc := range []struct {
		name, script string
	}{
		{"a write-open of a FIFO nobody reads", `mkfifo f; echo x > f; echo rc=$?`},
		{"a write-open with O_CREAT of a FIFO nobody reads", `mkfifo f; python3 -c '
import os
try:
    os.open("f", os.O_WRONLY|os.O_CREAT, 0o644); print("rc=0")
except OSError as e:
    print("rc=%d" % e.errno)'`},
		{"a read-open with O_TRUNC of a FIFO nobody writes", `mkfifo f; python3 -c '
import os
try:
    os.open("f", os.O_RDONLY|os.O_TRUNC); print("rc=0")
except OSError as e:
    print("rc=%d" % e.errno)'`},
		{"a write-open of a FIFO under a write rule (not asked about)", `mkfifo config/p; echo x > config/p; echo rc=$?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := wedgeWorkspace(t)
			id := "fifo-" + strconv.Itoa(i)
			done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
				"--call-id", id, "--workspace", ws, "--policy", pol, "--timeout", "5s", "--", "sh", "-c", tc.script))
			r := d.ended(t, tc.name, done)
			if r.Exit != 0 || !strings.Contains(r.Stdout, "rc=") || strings.Contains(r.Stdout, "rc=0") {
				t.Fatalf("the FIFO's open was not refused at once: exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
			}
			fifoDenied(t, d, id)
		})
	}
}

// The hostile tool asks to write config/x, a regular file, and while the request waits puts
// a FIFO in its place (unlink and mkfifo are not gated by a write rule). The approval then
// opens the name without blocking, finds a FIFO and refuses: the call ends by itself.
func TestApprovalSupervisorRefusesAFIFOSwappedInAfterTheQuestion(t *testing.T) {
	d, api, pol := wedgeSetup(t)
	ws := wedgeWorkspace(t)
	script := `(echo x > config/x; echo rc=$? > rc) & sleep 1; rm config/x && mkfifo config/x && touch swapped; wait; cat rc`
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", "swap", "--workspace", ws, "--policy", pol, "--timeout", "30s", "--", "sh", "-c", script))
	p := api.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "swap" && p.Rule == "config-writes" })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "swapped")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tool did not swap the FIFO in")
		}
	}
	if r := bermbin.Berm(t, nil, append([]string{"approve", p.ID, "--by", "alice"}, api.cli...)...); r.Exit != 0 {
		t.Fatalf("berm approve: %s", r.Stderr)
	}
	r := d.ended(t, "swap", done)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "rc=") || strings.Contains(r.Stdout, "rc=0") {
		t.Fatalf("the FIFO swapped in was opened: exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	if rec := d.call(t, "swap").Record; rec.EndReason == event.EndTimeout {
		t.Fatalf("the call ended by its cap, not by itself: %+v", rec)
	}
	fifoDenied(t, d, "swap")
}

// fifoDenied checks the call's trail says why its FIFO was not opened.
func fifoDenied(t *testing.T, d *bermd, id string) {
	t.Helper()
	for _, e := range bermbin.Timeline(t, d.state, "default/"+id).Events {
		if dn := e.Denial; dn != nil && dn.Layer == event.LayerApproval && strings.Contains(dn.Rule, "a write-open of a FIFO") {
			return
		}
	}
	t.Errorf("%s: no denial of the FIFO's open in the trail", id)
}

// A held request is ended with its call, however the call ends: the wall cap, the caller's
// SIGTERM, or the person's deny; the call's end never waits for the supervisor. The tool
// also has a write-open of a FIFO in flight (which wedged the supervisor before).
func TestApprovalHeldRequestEndsWithTheCall(t *testing.T) {
	d, api, pol := wedgeSetup(t)
	script := `mkfifo f; (echo x > f) & rm keep/x; echo rm=$?; wait`
	for _, tc := range []struct {
		name, id, timeout string
		end               func(t *testing.T, cmd *exec.Cmd, p approval.PendingView)
		reason            event.EndReason
		stdout            string
	}{
		{name: "the wall cap", id: "cap", timeout: "4s", reason: event.EndTimeout,
			end: func(t *testing.T, _ *exec.Cmd, _ approval.PendingView) {}},
		{name: "the caller's SIGTERM", id: "sigterm", timeout: "2m", reason: event.EndInterrupted,
			end: func(t *testing.T, cmd *exec.Cmd, _ approval.PendingView) { cmd.Process.Signal(syscall.SIGTERM) }},
		{name: "berm deny", id: "deny", timeout: "2m", stdout: "rm=1",
			end: func(t *testing.T, _ *exec.Cmd, p approval.PendingView) {
				if r := bermbin.Berm(t, nil, append([]string{"deny", p.ID, "--by", "bob"}, api.cli...)...); r.Exit != 0 {
					t.Fatalf("berm deny: %s", r.Stderr)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := wedgeWorkspace(t)
			cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
				"--call-id", tc.id, "--workspace", ws, "--policy", pol, "--timeout", tc.timeout, "--", "sh", "-c", script)
			done := bermbin.Start(t, cmd)
			p := api.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == tc.id })
			at := time.Now()
			tc.end(t, cmd, p)
			r := d.ended(t, tc.name, done)
			t.Logf("%s: the call ended %s after it was ended (the request was pending %.1f s)", tc.name, time.Since(at).Round(time.Millisecond), p.AgeSeconds)
			if _, err := os.Stat(filepath.Join(ws, "keep", "x")); err != nil {
				t.Errorf("keep/x went without an approval: %v", err)
			}
			for _, q := range api.list(t) {
				if q.CallID == tc.id {
					t.Errorf("still pending after the call's end: %+v", q)
				}
			}
			rec := d.call(t, tc.id).Record
			if tc.reason != "" && rec.EndReason != tc.reason {
				t.Errorf("end reason %q, want %q (exit %d, %q)", rec.EndReason, tc.reason, r.Exit, r.Stderr)
			}
			if !strings.Contains(r.Stdout, tc.stdout) {
				t.Errorf("stdout %q, want %q", r.Stdout, tc.stdout)
			}
		})
	}
}

// One call floods bermd with held syscalls (write-opens of FIFOs first, which held 16 of its
// supervisor's threads for ever before, then deletions of 64 files at once) while another
// tenant's call asks once: the approver still lists the
// neighbour's request and decides it, the neighbour's call completes, and the flooding call
// still ends at its wall cap with nothing of its files deleted.
func TestApprovalFloodBesideANeighbour(t *testing.T) {
	d, api, pol := wedgeSetup(t)
	flood := wedgeWorkspace(t)
	for i := 0; i < 64; i++ {
		f := filepath.Join(flood, "flood", "f"+strconv.Itoa(i))
		os.WriteFile(f, nil, 0o644)
		os.Lchown(f, 65534, 65534)
	}
	script := `python3 -c '
import os, threading, time
os.mkfifo("p")
def rm(i):
    try: os.unlink("flood/f%d" % i)
    except OSError: pass
def fifo():
    try: os.open("p", os.O_WRONLY)
    except OSError: pass
fs = [threading.Thread(target=fifo) for i in range(16)]
for t in fs: t.start()
time.sleep(0.5)
ts = [threading.Thread(target=rm, args=(i,)) for i in range(64)]
for t in ts: t.start()
for t in fs + ts: t.join()
'`
	floodDone := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--tenant", "flooder", "--call-id", "flood", "--workspace", flood, "--policy", pol, "--timeout", "20s", "--", "sh", "-c", script))
	api.waitFor(t, floodDone, func(p approval.PendingView) bool { return p.CallID == "flood" })

	neighbour := wedgeWorkspace(t)
	nDone := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--tenant", "neighbour", "--call-id", "neighbour", "--workspace", neighbour, "--policy", pol, "--", "sh", "-c", "rm keep/x; echo rm=$?"))
	p := api.waitFor(t, nDone, func(p approval.PendingView) bool { return p.CallID == "neighbour" })
	if r := bermbin.Berm(t, nil, append([]string{"approve", p.ID, "--by", "alice"}, api.cli...)...); r.Exit != 0 {
		t.Fatalf("berm approve: %s", r.Stderr)
	}
	if r := d.ended(t, "neighbour", nDone); r.Exit != 0 || !strings.Contains(r.Stdout, "rm=0") {
		t.Fatalf("the neighbour's approved delete: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(neighbour, "keep", "x")); err == nil {
		t.Error("the neighbour's keep/x is still there after its approval")
	}
	d.ended(t, "flood", floodDone)
	if rec := d.call(t, "flood").Record; rec.EndReason != event.EndTimeout {
		t.Errorf("the flood ended with %q, want its wall cap", rec.EndReason)
	}
	left, _ := os.ReadDir(filepath.Join(flood, "flood"))
	if len(left) != 64 {
		t.Errorf("%d of the flood's 64 files left, none approved", len(left))
	}
	for _, q := range api.list(t) {
		t.Errorf("still pending after both calls: %+v", q)
	}
}

// bermd stopped (SIGTERM) while a call's request is held, with a write-open of a FIFO in
// flight beside it: the call ends with bermd, nothing is deleted, bermd exits; a bermd
// restarted on the same sockets takes its approval socket back and serves requests again.
// Before, the FIFO held a supervisor thread for ever, the call never ended, and bermd's
// stop waited for it without bound.
func TestApprovalBermdRestartedWhileARequestIsHeld(t *testing.T) {
	d, api, pol := wedgeSetup(t)
	ws := wedgeWorkspace(t)
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", "held", "--workspace", ws, "--policy", pol, "--", "sh", "-c", `mkfifo f; (echo x > f) & rm keep/x; echo rm=$?; wait`))
	api.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "held" })
	d.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		d.cmd.Process.Kill()
		t.Fatal("bermd did not exit in 90 s of its SIGTERM with a request held")
	}
	d.ended(t, "held", done)
	if _, err := os.Stat(filepath.Join(ws, "keep", "x")); err != nil {
		t.Errorf("keep/x went without an approval: %v", err)
	}

	again := exec.Command(d.cmd.Path, d.cmd.Args[1:]...)
	again.Stderr = d.log
	if err := again.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		again.Process.Signal(os.Interrupt)
		again.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(d.socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted bermd did not start:\n%s", d.log)
		}
	}
	done = bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", "wedge-after", "--workspace", ws, "--policy", pol, "--", "sh", "-c", `rm keep/x; echo rm=$?`))
	p := api.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "wedge-after" })
	if r := bermbin.Berm(t, nil, append([]string{"approve", p.ID, "--by", "alice"}, api.cli...)...); r.Exit != 0 {
		t.Fatalf("berm approve on the restarted bermd: %s", r.Stderr)
	}
	if r := d.ended(t, "wedge-after", done); !strings.Contains(r.Stdout, "rm=0") {
		t.Fatalf("the approved delete on the restarted bermd: %+v", r)
	}
}
