package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/slowfs"
)

// judgeSlowScript names paths on a slow file system the call cannot see (open, stat, unlink:
// each fails at once in the call's root), then does what matters for an incident: a read of a
// file the policy denies, the deletion of a workspace file and an exec of id.
const judgeSlowScript = `import os, sys
slow = sys.argv[1]
os.chdir("work")
open("victim", "w").close()
for p in (slow + "/f", slow + "/d/f", slow + "/d/../f", slow):
    for attempt in (lambda: open(p), lambda: open(p, "w"), lambda: os.stat(p), lambda: os.unlink(p)):
        try:
            attempt()
        except OSError:
            pass
try:
    open("../vault/secret").read()
except PermissionError:
    pass
os.unlink("victim")
os.execv("/usr/bin/id", ["id"])
`

// A hung FUSE file system mounted on the host, outside the call's view, and a tool that names
// paths on it: the judge of the call's events (who names the denials the kernel does not
// report) must not look them up on the host, or its thread waits in the kernel for the
// server's answer and the call's trail stops there. The paths are judged by their strings
// (the denial says they were not resolved, and why), and the denied read, the deletion and
// the exec that follow are all in the trail; the call ends by itself, its record complete,
// and nothing of bermd (nor of the embedded berm) waits on the file system. Before, the judge
// lstat'ed the paths on the host: bermd's worker waited for ever ("the call's stage of the
// pipeline finished no event for 5s", the three events lost), and the embedded berm could not
// exit at all.
func TestTheJudgeNeverWaitsOnASlowFileSystem(t *testing.T) {
	bermbin.RequireRoot(t)
	parent, err := os.MkdirTemp("/run", "berm-judgefs-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o755)
	t.Cleanup(func() { os.RemoveAll(parent) })
	modes := []string{"bermd", "embedded"}
	slows := map[string]*slowfs.FS{}
	for _, mode := range modes {
		slows[mode] = slowfs.Mount(t, parent)
		if err := os.WriteFile(filepath.Join(slows[mode].Dir, "f"), []byte("f"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t)
	t.Cleanup(func() { // before bermd's stop: nothing of it may wait on them then
		for _, s := range slows {
			s.Release()
		}
	})
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			slow := slows[mode]
			ws := bermbin.Workspace(t)
			// The policy denies vault/ (readable on the host); the tool works in work/ (a
			// sibling of a denied tree is granted whole, the workspace's own entries are not).
			os.Mkdir(filepath.Join(ws, "vault"), 0o755)
			os.Mkdir(filepath.Join(ws, "work"), 0o755)
			if err := os.WriteFile(filepath.Join(ws, "vault", "secret"), []byte("the host's secret\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
			pol := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: judge-slowfs}
spec:
  filesystem:
    deny: ["${WORKSPACE}/vault"]
`), 0o644); err != nil {
				t.Fatal(err)
			}
			id := "judge-slow-" + mode
			state := d.state
			args := []string{"run", "--call-id", id, "--workspace", ws, "--policy", pol}
			if mode == "bermd" {
				args = append(args, "--socket", d.socket, "--daemon", "required")
			} else {
				state = filepath.Join(t.TempDir(), "state")
				args = append(args, "--no-rules", "--state-dir", state, "--daemon", "never")
			}
			slow.Hold(slowfs.Lookup, slowfs.Getattr, slowfs.Open, slowfs.Read, slowfs.Write, slowfs.Unlink)
			cmd := exec.Command(bermbin.Path(t, "berm"), append(args, "--", "python3", "-c", judgeSlowScript, slow.Dir)...)
			done := bermbin.Start(t, cmd)
			berm := d.cmd.Process.Pid
			if mode == "embedded" {
				berm = cmd.Process.Pid
			}
			var r bermbin.Result
			select {
			case r = <-done:
			case <-time.After(slowEndDeadline):
				held := slow.Waiting()
				slow.Release() // what waits on the file system goes on: the test can end
				t.Fatalf("the call did not end in %s; held on the slow file system: %v", slowEndDeadline, held)
			}
			held := slow.Waiting()
			slow.Release()
			for _, w := range held {
				if w.TGID == uint32(berm) {
					t.Errorf("%s's thread waits on the slow file system after the call's end: %v", mode, w)
				}
			}
			if r.Exit != 0 || !strings.Contains(r.Stdout, "uid=") {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
			}
			tl := bermbin.Timeline(t, state, "default/"+id)
			var denied, unlink, execID bool
			unresolved := 0
			for _, e := range tl.Events {
				switch {
				case e.Denial != nil && e.Denial.Object == filepath.Join(ws, "vault", "secret"):
					denied = true
				case e.Denial != nil && strings.HasPrefix(e.Denial.Object, slow.Dir):
					if !strings.Contains(e.Denial.Rule, "not resolved: on a fuse.slowfs file system at "+slow.Dir) {
						t.Errorf("a denial of a path on the slow file system does not say it was not resolved: %+v", e.Denial)
					}
					unresolved++
				case e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.HasSuffix(e.Syscall.Path, "victim") && e.Syscall.Result == 0:
					unlink = true
				case e.Exec != nil && e.Exec.Filename == "/usr/bin/id":
					execID = true
				}
			}
			rec := tl.Call.Record
			if rec == nil {
				t.Fatal("the call has no record")
			}
			t.Logf("%s: %d denials of paths on the slow file system, judged unresolved; %d operations asked of it; complete %v %s",
				mode, unresolved, slow.Served(), rec.Complete, rec.IncompleteReason)
			if !denied || !unlink || !execID {
				t.Errorf("after the paths on the slow file system: the denied read %v, the deletion of victim %v, the exec of id %v", denied, unlink, execID)
			}
			if unresolved == 0 {
				t.Error("no denial names a path on the slow file system (the tool's attempts are withheld from it)")
			}
			if !rec.Complete {
				t.Errorf("the record is incomplete: %s (dropped %+v)", rec.IncompleteReason, rec.Dropped)
			}
		})
	}
}

// judgeBoundScript tries writes on a slow file system bound read-only into the call's root
// (each refused by Landlock, answered by the file system before the test holds it), between
// markers the test waits for, then does what matters for an incident.
const judgeBoundScript = `import os, sys, time
slow = sys.argv[1]
os.chdir("work")
open("victim", "w").close()
def wait(marker):
    while not os.path.exists(marker):
        time.sleep(0.01)
open("ready", "w").close()
wait("go")
for p in (slow + "/f", slow + "/new", slow + "/d/../f"):
    for attempt in (lambda: open(p, "w"), lambda: os.unlink(p), lambda: os.mkdir(p)):
        try:
            attempt()
        except OSError:
            pass
open("attempted", "w").close()
wait("judge")
try:
    open("../vault/secret").read()
except PermissionError:
    pass
os.unlink("victim")
os.execv("/usr/bin/id", ["id"])
`

// The same with a slow file system bound into the call's root (granted for reading): the
// tool's refused writes there were answered by the file system, which hangs before berm
// judges them (the embedded berm is stopped meanwhile: nothing timed). The judge does not
// look the paths up again; the call ends, its trail complete, and the embedded berm waits on
// nothing. Before, its worker waited on the file system and the berm could not exit.
func TestTheJudgeNeverWaitsOnASlowFileSystemBoundIntoTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	parent, err := os.MkdirTemp("/run", "berm-judgefs-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o755)
	t.Cleanup(func() { os.RemoveAll(parent) })
	slow := slowfs.Mount(t, parent)
	if err := os.WriteFile(filepath.Join(slow.Dir, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := bermbin.Workspace(t)
	for _, d := range []string{"vault", "work"} {
		os.Mkdir(filepath.Join(ws, d), 0o755)
	}
	if err := os.WriteFile(filepath.Join(ws, "vault", "secret"), []byte("the host's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	pol := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: judge-slowfs-bound}
spec:
  filesystem:
    read: [%q]
    deny: ["${WORKSPACE}/vault"]
`, slow.Dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--call-id", "judge-bound", "--workspace", ws, "--policy", pol,
		"--no-rules", "--state-dir", state, "--daemon", "never", "--", "python3", "-c", judgeBoundScript, slow.Dir)
	done := bermbin.Start(t, cmd)
	stopped := false
	resume := func() {
		if stopped {
			cmd.Process.Signal(syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(func() { resume(); slow.Release() })
	waitFor := func(marker string) {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws, "work", marker)); err == nil {
				return
			}
			select {
			case r := <-done:
				t.Fatalf("the call ended before the tool made %s: exit %d\nstdout: %s\nstderr: %s", marker, r.Exit, r.Stdout, r.Stderr)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tool did not make %s in a minute", marker)
			}
		}
	}
	mark := func(marker string) {
		if err := os.WriteFile(filepath.Join(ws, "work", marker), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("ready")
	// berm run is the embedded agent: stopped, it judges nothing while the tool tries its
	// writes and the file system then hangs.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	mark("go")
	waitFor("attempted")
	slow.Hold(slowfs.Lookup, slowfs.Getattr, slowfs.Open, slowfs.Read, slowfs.Write, slowfs.Unlink)
	resume()
	mark("judge")
	var r bermbin.Result
	select {
	case r = <-done:
	case <-time.After(slowEndDeadline):
		held := slow.Waiting()
		slow.Release()
		t.Fatalf("the call did not end in %s; held on the slow file system: %v", slowEndDeadline, held)
	}
	held := slow.Waiting()
	slow.Release()
	for _, w := range held {
		if w.TGID == uint32(cmd.Process.Pid) {
			t.Errorf("berm's thread waits on the slow file system after the call's end: %v", w)
		}
	}
	if r.Exit != 0 || !strings.Contains(r.Stdout, "uid=") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "judge-bound")
	var denied, unlink, execID bool
	unresolved := 0
	for _, e := range tl.Events {
		switch {
		case e.Denial != nil && e.Denial.Object == filepath.Join(ws, "vault", "secret"):
			denied = true
		case e.Denial != nil && strings.HasPrefix(e.Denial.Object, slow.Dir):
			if !strings.Contains(e.Denial.Rule, "not resolved: on a fuse.slowfs file system at "+slow.Dir) {
				t.Errorf("a denial of a path on the slow file system does not say it was not resolved: %+v", e.Denial)
			}
			unresolved++
		case e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.HasSuffix(e.Syscall.Path, "victim") && e.Syscall.Result == 0:
			unlink = true
		case e.Exec != nil && e.Exec.Filename == "/usr/bin/id":
			execID = true
		}
	}
	rec := tl.Call.Record
	if rec == nil {
		t.Fatal("the call has no record")
	}
	t.Logf("%d denials of paths on the bound slow file system, judged unresolved; complete %v %s", unresolved, rec.Complete, rec.IncompleteReason)
	if !denied || !unlink || !execID {
		t.Errorf("after the writes on the slow file system: the denied read %v, the deletion of victim %v, the exec of id %v", denied, unlink, execID)
	}
	if unresolved == 0 {
		t.Error("no denial names a path on the slow file system (the tool's writes there are refused)")
	}
	if !rec.Complete {
		t.Errorf("the record is incomplete: %s (dropped %+v)", rec.IncompleteReason, rec.Dropped)
	}
}

// With an exec rule every exec of the call is held, and the supervisor looks the program up
// to know whether it is gated. A program on a slow file system bound into the call's root is
// not looked up by bermd: the exec continues, the tool's own thread waits on the file system
// (the kernel's exec hook has the last word on a gated program there), and the denied read,
// the deletion and the exec that follow are in the trail. Before, bermd's handler waited on
// the file system for the program's look-up.
func TestAHeldExecNeverWaitsOnASlowFileSystem(t *testing.T) {
	bermbin.RequireRoot(t)
	parent, err := os.MkdirTemp("/run", "berm-judgefs-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o755)
	t.Cleanup(func() { os.RemoveAll(parent) })
	slow := slowfs.Mount(t, parent)
	if err := os.WriteFile(filepath.Join(slow.Dir, "prog"), []byte("#!/bin/sh\necho prog\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t)
	t.Cleanup(slow.Release) // before bermd's stop
	ws := bermbin.Workspace(t)
	for _, dir := range []string{"vault", "work"} {
		os.Mkdir(filepath.Join(ws, dir), 0o755)
	}
	if err := os.WriteFile(filepath.Join(ws, "vault", "secret"), []byte("the host's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "work", "victim"), nil, 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	pol := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: exec-slowfs}
spec:
  filesystem:
    read: [%q]
    deny: ["${WORKSPACE}/vault"]
  approvals:
    timeout: 2m
    rules:
      - name: whoami
        match: {exec: /usr/bin/whoami}
`, slow.Dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	slow.Hold(slowfs.Lookup, slowfs.Getattr, slowfs.Open, slowfs.Read)
	script := fmt.Sprintf(`cd work; %s/prog & cat ../vault/secret; rm victim; /usr/bin/id`, slow.Dir)
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--call-id", "exec-slow", "--workspace", ws, "--policy", pol,
		"--socket", d.socket, "--daemon", "required", "--", "sh", "-c", script)
	done := bermbin.Start(t, cmd)
	held, err := slow.WaitHeld(slowEndDeadline)
	if err != nil {
		t.Fatalf("nothing waits on the slow file system: %v", err)
	}
	for _, w := range held {
		if w.TGID == uint32(d.cmd.Process.Pid) {
			t.Errorf("bermd's thread waits on the slow file system for a held exec's program: %v", w)
		}
	}
	slow.Release() // the tool's own exec goes on: the call can end
	var r bermbin.Result
	select {
	case r = <-done:
	case <-time.After(slowEndDeadline):
		t.Fatalf("the call did not end in %s once the file system was released", slowEndDeadline)
	}
	if !strings.Contains(r.Stdout, "uid=") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, d.state, "default/exec-slow")
	var denied, unlink, execID bool
	for _, e := range tl.Events {
		switch {
		case e.Denial != nil && e.Denial.Object == filepath.Join(ws, "vault", "secret"):
			denied = true
		case e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.HasSuffix(e.Syscall.Path, "victim") && e.Syscall.Result == 0:
			unlink = true
		case e.Exec != nil && e.Exec.Filename == "/usr/bin/id":
			execID = true
		}
	}
	rec := tl.Call.Record
	if rec == nil {
		t.Fatal("the call has no record")
	}
	t.Logf("held on the slow file system: %v; complete %v %s", held, rec.Complete, rec.IncompleteReason)
	if !denied || !unlink || !execID {
		t.Errorf("the denied read %v, the deletion of victim %v, the exec of id %v", denied, unlink, execID)
	}
	if !rec.Complete {
		t.Errorf("the record is incomplete: %s", rec.IncompleteReason)
	}
}
