package main

import (
	"fmt"
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
	"github.com/bermsec/berm/testenv/slowfs"
)

// slowPolicy grants the slow file system for writing and gates writes under config/ and
// deletions under keep/: every write-open and every deletion of the call is the supervisor's.
func slowPolicy(slow string) string {
	return fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-slowfs}
spec:
  filesystem: {write: ["${WORKSPACE}", %q, /dev/null]}
  approvals:
    timeout: 2m
    rules:
      - name: config-writes
        match: {write: "${WORKSPACE}/config/**"}
      - name: keep-deletes
        match: {unlink: "${WORKSPACE}/keep/**"}
`, slow)
}

// slowEnd is how a call is ended in TestApprovalSupervisorNeverWaitsOnASlowFileSystem.
type slowEnd struct {
	name, timeout string
	reason        event.EndReason // "": the call ends by itself
	end           func(t *testing.T, cmd *exec.Cmd, api approvalsAPI, p approval.PendingView)
}

var slowEnds = []slowEnd{
	{name: "the wall cap", timeout: "4s", reason: event.EndTimeout,
		end: func(*testing.T, *exec.Cmd, approvalsAPI, approval.PendingView) {}},
	{name: "the caller's SIGTERM", timeout: "2m", reason: event.EndInterrupted,
		end: func(_ *testing.T, cmd *exec.Cmd, _ approvalsAPI, _ approval.PendingView) {
			cmd.Process.Signal(syscall.SIGTERM)
		}},
	{name: "berm deny", timeout: "2m",
		end: func(t *testing.T, _ *exec.Cmd, api approvalsAPI, p approval.PendingView) {
			if r := bermbin.Berm(t, nil, append([]string{"deny", p.ID, "--by", "bob"}, api.cli...)...); r.Exit != 0 {
				t.Fatalf("berm deny: %s", r.Stderr)
			}
		}},
}

// slowEndDeadline is the test's own failure deadline for a call's end: generous, as the
// point is that the call ends rather than hangs (the measured time is logged).
const slowEndDeadline = 20 * time.Second

// A FUSE file system whose server answers nothing (every look-up, stat, open, write and
// deletion held, as a hung sshfs or a hostile server would) is bound into the call's root.
// The tool writes a file on it and deletes one there, beside a deletion in its workspace that
// waits for a person. The supervisor refuses the two on the slow file system at once, asking
// its server nothing (a denial names it), so the wall cap, the caller's SIGTERM and berm
// deny each end the call promptly, with the end reason in the record; nothing of bermd (nor
// of the embedded berm) is left waiting on the file system, and bermd runs the next call.
// Before, the supervisor's thread looked the name up and waited in the kernel for ever: the
// call ended only by its cap (deny left it running, the background writes held), bermd kept
// the thread, and an embedded berm could not exit at all.
func TestApprovalSupervisorNeverWaitsOnASlowFileSystem(t *testing.T) {
	bermbin.RequireRoot(t)
	parent, err := os.MkdirTemp("/run", "berm-slowfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o755)
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := t.TempDir()
	token, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	if _, err := approval.LoadToken(token); err != nil {
		t.Fatal(err)
	}
	apiCLI := approvalsAPI{cli: []string{"--dir", api, "--token", token}}
	// Mounted before bermd starts: a sandbox's mount namespace is a copy of the host's.
	modes := []string{"bermd", "embedded"}
	slows := map[string]*slowfs.FS{}
	for _, mode := range modes {
		for i := range slowEnds {
			slows[mode+strconv.Itoa(i)] = slowfs.Mount(t, parent)
		}
	}
	d := startDaemon(t, "--approvals-dir", filepath.Join(dir, "bermd-api"), "--approvals-token", token)
	bermdAPI := approvalsAPI{cli: []string{"--dir", filepath.Join(dir, "bermd-api"), "--token", token}}
	t.Cleanup(func() { // before bermd's stop: nothing of it may wait on them then
		for _, s := range slows {
			s.Release()
		}
	})

	for _, mode := range modes {
		for i, tc := range slowEnds {
			t.Run(mode+": "+tc.name, func(t *testing.T) {
				slow := slows[mode+strconv.Itoa(i)]
				if err := os.WriteFile(filepath.Join(slow.Dir, "g"), []byte("g"), 0o666); err != nil {
					t.Fatal(err)
				}
				pol := filepath.Join(t.TempDir(), "p.yaml")
				if err := os.WriteFile(pol, []byte(slowPolicy(slow.Dir)), 0o644); err != nil {
					t.Fatal(err)
				}
				ws := wedgeWorkspace(t)
				id := "slow-" + mode + "-" + strconv.Itoa(i)
				script := fmt.Sprintf(`(echo x > %[1]s/f; echo "open=$?" > open.rc) & (unlink %[1]s/g; echo "unlink=$?" > unlink.rc) & rm keep/x; echo rm=$?; wait; cat open.rc unlink.rc`, slow.Dir)
				slow.Hold(slowfs.Lookup, slowfs.Getattr, slowfs.Open, slowfs.Read, slowfs.Write, slowfs.Unlink)

				a, state := bermdAPI, d.state
				args := []string{"run", "--call-id", id, "--workspace", ws, "--policy", pol, "--timeout", tc.timeout}
				if mode == "bermd" {
					args = append(args, "--socket", d.socket, "--daemon", "required")
				} else {
					a, state = apiCLI, filepath.Join(t.TempDir(), "state")
					args = append(args, "--no-rules", "--state-dir", state, "--daemon", "never")
				}
				cmd := exec.Command(bermbin.Path(t, "berm"), append(args, "--", "sh", "-c", script)...)
				cmd.Env = append(os.Environ(), "BERM_APPROVALS_DIR="+api, "BERM_APPROVALS_TOKEN="+token)
				threads := procThreads(d.cmd.Process.Pid)
				done := bermbin.Start(t, cmd)
				supervisor := d.cmd.Process.Pid
				if mode == "embedded" {
					supervisor = cmd.Process.Pid
				}
				p := a.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == id })
				at := time.Now()
				tc.end(t, cmd, a, p)
				var r bermbin.Result
				select {
				case r = <-done:
				case <-time.After(slowEndDeadline):
					held := slow.Waiting()
					slow.Release() // what waits on the file system goes on: the test can end
					t.Fatalf("the call did not end in %s of %s; held on the slow file system: %v", slowEndDeadline, tc.name, held)
				}
				t.Logf("%s (%s): the call ended %s after it was ended (%d operations asked of the slow file system)", tc.name, mode, time.Since(at).Round(time.Millisecond), slow.Served())
				t.Logf("stdout %q, stderr %q", r.Stdout, r.Stderr)

				for _, w := range slow.Waiting() {
					if w.TGID == uint32(supervisor) {
						t.Errorf("%s's thread still waits on the slow file system after the call's end: %v", mode, w)
					}
				}
				if _, err := os.Stat(filepath.Join(ws, "keep", "x")); err != nil {
					t.Errorf("keep/x went without an approval: %v", err)
				}
				var rec *event.CallRecord
				for _, c := range bermbin.Calls(t, state) {
					if c.Start.CallID == id {
						rec = c.Record
					}
				}
				if rec == nil {
					t.Fatalf("call %s has no record (exit %d, %q)", id, r.Exit, r.Stderr)
				}
				if tc.reason != "" && rec.EndReason != tc.reason || tc.reason == "" && rec.EndReason != event.EndExit {
					t.Errorf("end reason %q, want %q (exit %d, %q)", rec.EndReason, tc.reason, r.Exit, r.Stderr)
				}
				if tc.reason == "" && (!strings.Contains(r.Stdout, "rm=1") || !strings.Contains(r.Stdout, "open=") || !strings.Contains(r.Stdout, "unlink=") ||
					strings.Contains(r.Stdout, "open=0") || strings.Contains(r.Stdout, "unlink=0")) {
					t.Errorf("stdout %q: want the deletion denied and both operations on the slow file system refused", r.Stdout)
				}
				refused := 0
				for _, e := range bermbin.Timeline(t, state, "default/"+id).Events {
					if dn := e.Denial; dn != nil && dn.Layer == event.LayerApproval && strings.Contains(dn.Rule, "fuse.slowfs file system at "+slow.Dir) {
						refused++
					}
				}
				if refused != 2 {
					t.Errorf("%d denials naming the slow file system in the trail, want 2 (the write-open and the unlink)", refused)
				}
				if mode == "bermd" {
					t.Logf("bermd's threads: %d before the call, %d after", threads, procThreads(d.cmd.Process.Pid))
					after := d.run(t, "", "--call-id", id+"-after", "--workspace", ws, "--", "sh", "-c", "echo after > after.txt && cat after.txt")
					if after.Exit != 0 || !strings.Contains(after.Stdout, "after") {
						t.Errorf("bermd's next call: %+v", after)
					}
				}
			})
		}
	}
}

// procThreads is a process's thread count.
func procThreads(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
