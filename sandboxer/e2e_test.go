package sandboxer_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
)

func run(t *testing.T, state string, args ...string) bermbin.Result {
	t.Helper()
	return bermbin.Berm(t, nil, append([]string{"run", "--state-dir", state, "--no-rules"}, args...)...)
}

// A call's exec, fork, open, connect and exit events are in its timeline, with its call id;
// a busy process outside any sandbox leaves nothing.
func TestTimelineHasCallEventsAndNothingFromOutside(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)

	// A listener on the host loopback: the call has its own network namespace, so its
	// connect must fail, and the listener must see nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	marker := filepath.Join(t.TempDir(), "outside-marker")
	os.WriteFile(marker, []byte("x"), 0o644)
	busy := exec.Command("sh", "-c", fmt.Sprintf("while :; do cat %s >/dev/null; done", marker))
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()

	script := fmt.Sprintf(`cat /etc/os-release >/dev/null; (exit 7); python3 -c 'import socket; s=socket.socket(); print(s.connect_ex(("127.0.0.1", %d)))'; echo done > out.txt`, port)
	r := run(t, state, "--call-id", "timeline-1", "--tool", "shell", "--tenant", "t1", "--workspace", ws, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "timeline-1")
	seen := map[event.Kind]bool{}
	var sawOSRelease, sawConnect, sawShExec, sawExit7 bool
	var lastSeq uint64
	for _, e := range tl.Events {
		if e.CallID != "timeline-1" || e.Tool != "shell" || e.Tenant != "t1" {
			t.Fatalf("event %d carries the wrong identity: %+v", e.Seq, e)
		}
		if e.Seq <= lastSeq {
			t.Fatalf("events out of order: %d after %d", e.Seq, lastSeq)
		}
		lastSeq = e.Seq
		seen[e.Kind] = true
		switch {
		case e.Open != nil && e.Open.Path == marker:
			t.Fatalf("an open by a process outside the sandbox was reported: %+v", e)
		case e.Open != nil && (e.Open.Path == "/usr/lib/os-release" && e.Open.PathSource == "kernel") && e.Open.Result >= 0: // /etc/os-release, as the kernel opened it
			sawOSRelease = true
		case e.Connect != nil && e.Connect.Port == uint16(port) && e.Connect.Addr == "127.0.0.1":
			sawConnect = e.Connect.Result < 0
		case e.Exec != nil && e.Exec.Filename == "/usr/bin/sh":
			sawShExec = true
		case e.Exit != nil && e.Exit.Code == 7:
			sawExit7 = true
		}
	}
	for _, k := range []event.Kind{event.KindExec, event.KindFork, event.KindOpen, event.KindConnect, event.KindExit} {
		if !seen[k] {
			t.Errorf("no %s event in the timeline", k)
		}
	}
	if !sawOSRelease || !sawConnect || !sawShExec || !sawExit7 {
		t.Errorf("missing events: open /etc/os-release %v, failed connect to host listener %v, exec sh %v, exit 7 %v",
			sawOSRelease, sawConnect, sawShExec, sawExit7)
	}
	if rec := tl.Call.Record; rec == nil || rec.EndReason != event.EndExit || rec.SyscallTotal == 0 || rec.Counts.Exec == 0 {
		t.Errorf("call record incomplete: %+v", rec)
	}
	// Nothing from outside anywhere in the journal.
	for _, c := range bermbin.Calls(t, state) {
		for _, e := range bermbin.Timeline(t, state, c.Start.CallID).Events {
			if e.Open != nil && e.Open.Path == marker {
				t.Fatalf("outside process reported in call %s", c.Start.CallID)
			}
		}
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("the host listener received a connection from the sandbox")
	}
}

// Each resource cap ends its call with its own reason, and the host keeps working.
func TestCapsEndTheCallWithTheirReason(t *testing.T) {
	bermbin.RequireRoot(t)
	cases := []struct {
		name   string
		args   []string
		reason event.EndReason
	}{
		{"fork-bomb", []string{"--pids", "64", "--", "sh", "-c", "f() { f | f & }; f; sleep 30"}, event.EndPidsLimit},
		{"memory-bomb", []string{"--memory", "64Mi", "--", "python3", "-c", "b=[]\nwhile True: b.append(bytearray(1<<20))"}, event.EndMemoryLimit},
		{"endless-loop", []string{"--timeout", "1s", "--", "sh", "-c", "while :; do :; done"}, event.EndTimeout},
		{"output-flood", []string{"--output-limit", "64k", "--", "sh", "-c", "yes berm"}, event.EndOutputLimit},
		{"tmp-fill", []string{"--tmp-size", "1Mi", "--", "sh", "-c", "cat /dev/zero > /tmp/fill; sleep 30"}, event.EndTmpLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			id := "cap-" + tc.name
			r := run(t, state, append([]string{"--call-id", id}, tc.args...)...)
			if want, _ := event.EndedStatus(tc.reason); r.Exit != want {
				t.Errorf("exit status %d, want %d (berm ended the call: %s)\nstderr: %s", r.Exit, want, tc.reason, r.Stderr)
			}
			if !strings.Contains(r.Stderr, string(tc.reason)) {
				t.Errorf("berm run did not print the end reason %q: %s", tc.reason, r.Stderr)
			}
			tl := bermbin.Timeline(t, state, id)
			if tl.Call.Record == nil || tl.Call.Record.EndReason != tc.reason {
				t.Fatalf("end reason %+v, want %s", tl.Call.Record, tc.reason)
			}
			var limitEvent bool
			for _, e := range tl.Events {
				limitEvent = limitEvent || e.Kind == event.KindLimit
			}
			if !limitEvent {
				t.Error("no limit event in the timeline")
			}
			// The host still runs processes.
			if out, err := exec.Command("sh", "-c", "echo alive").Output(); err != nil || string(out) != "alive\n" {
				t.Fatalf("host not responsive after %s: %v %q", tc.name, err, out)
			}
		})
	}
}

// After the call nothing of it survives: not a setsid'd double-forked daemon, not its /tmp,
// and the caller's environment never reached it.
func TestNothingSurvivesAndEnvironmentIsClean(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	const marker = "9876543"
	script := `setsid sh -c '(sleep ` + marker + ` &) ; sleep ` + marker + `' </dev/null >/dev/null 2>&1 &
echo secret > /tmp/call-tmp-file
env > env.txt
ls /tmp > tmp-listing.txt
sleep 0.2`
	r := bermbin.Berm(t, []string{"BERM_TEST_SECRET=hunter2"}, "run", "--state-dir", state, "--no-rules",
		"--call-id", "survivors", "--workspace", ws, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), marker) {
			t.Fatalf("a process of the call survived: %s %q", p, b)
		}
	}
	if _, err := os.Stat("/tmp/call-tmp-file"); err == nil {
		t.Fatal("the call's /tmp file is on the host's /tmp")
	}
	env, err := os.ReadFile(filepath.Join(ws, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "hunter2") || strings.Contains(string(env), "BERM_TEST_SECRET") {
		t.Fatalf("the caller's environment leaked into the call:\n%s", env)
	}
	if !strings.Contains(string(env), "BERM_CALL_ID=survivors") {
		t.Fatalf("call environment lacks its identity:\n%s", env)
	}
	// A second call sees a fresh, empty /tmp.
	r = run(t, state, "--call-id", "survivors-2", "--", "sh", "-c", "ls -A /tmp")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Fatalf("second call's /tmp is not empty: exit %d %q", r.Exit, r.Stdout)
	}
	// The call's cgroup is gone.
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/berm/default/survivors")
	matches2, _ := filepath.Glob("/sys/fs/cgroup/berm/default/survivors")
	if len(matches)+len(matches2) > 0 {
		t.Fatalf("cgroups left behind: %v %v", matches, matches2)
	}
}

// The tool's exit status and signals come back as berm run's status.
func TestExitStatus(t *testing.T) {
	bermbin.RequireRoot(t)
	state := t.TempDir()
	for _, tc := range []struct {
		script string
		want   int
		reason event.EndReason
	}{
		{"exit 0", 0, event.EndExit},
		{"exit 42", 42, event.EndExit},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM), event.EndSignal},
	} {
		r := run(t, state, "--", "sh", "-c", tc.script)
		if r.Exit != tc.want {
			t.Errorf("%q: exit %d, want %d (%s)", tc.script, r.Exit, tc.want, r.Stderr)
		}
	}
	r := run(t, state, "--", "/nonexistent/tool")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "setup_failed") {
		t.Errorf("missing tool: exit %d, stderr %q", r.Exit, r.Stderr)
	}
}

// The journal survives kill -9 of its writer mid-call: earlier records intact, the torn tail
// skipped by readers and cut by the next writer; and the killed call's processes die with it.
func TestJournalSurvivesKill9(t *testing.T) {
	bermbin.RequireRoot(t)
	state := t.TempDir()
	// A killed launcher leaves its (empty) cgroup behind, and call ids must be unique: make
	// this run's id unique so reruns of the test do not collide with it.
	killed := fmt.Sprintf("killed-%d", time.Now().UnixNano())
	if r := run(t, state, "--call-id", "before", "--", "sh", "-c", "echo before"); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--call-id", killed, "--",
		"sh", "-c", "while :; do cat /etc/hostname > /dev/null; sleep 0.01; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the call is in the journal and has events.
	deadline := time.Now().Add(20 * time.Second)
	for {
		tl := bermbin.Berm(t, nil, "timeline", "--state-dir", state, "--json", killed)
		if tl.Exit == 0 && strings.Contains(tl.Stdout, "/etc/hostname") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("call never showed up in the journal")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	// A torn tail: the first bytes of a record whose writer died.
	segs, _ := filepath.Glob(filepath.Join(state, "journal", "segment-*.journal"))
	if len(segs) == 0 {
		t.Fatal("no journal segment")
	}
	last := segs[len(segs)-1]
	before, _ := os.Stat(last)
	f, _ := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 2, '[', '{'})
	f.Close()

	calls := bermbin.Calls(t, state)
	if len(calls) != 2 || calls[0].Start.CallID != "before" || calls[0].Record == nil || calls[0].Record.EndReason != event.EndExit {
		t.Fatalf("earlier records not intact: %+v", calls)
	}
	if calls[1].Start.CallID != killed || calls[1].Record != nil {
		t.Fatalf("killed call should be listed without a record: %+v", calls[1])
	}
	// The next writer cuts the torn tail and appends after it.
	if r := run(t, state, "--call-id", "after", "--", "true"); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	calls = bermbin.Calls(t, state)
	if len(calls) != 3 || calls[2].Start.CallID != "after" || calls[2].Record == nil {
		t.Fatalf("journal after recovery: %+v", calls)
	}
	if st, _ := os.Stat(last); st.Size() <= before.Size() {
		t.Fatalf("segment did not grow past the cut tail")
	}
	// The next launch reaped the killed call's cgroup.
	if matches, _ := filepath.Glob("/sys/fs/cgroup/*/berm/default/" + killed); len(matches) > 0 {
		t.Errorf("the killed call's cgroups were not reaped: %v", matches)
	}
	if matches, _ := filepath.Glob("/sys/fs/cgroup/berm/default/" + killed); len(matches) > 0 {
		t.Errorf("the killed call's cgroups were not reaped: %v", matches)
	}
	// The killed call's processes died with their launcher.
	time.Sleep(200 * time.Millisecond)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "while :; do cat /etc/hostname") {
			t.Fatalf("the killed call's tool survived: %s", p)
		}
	}
}

// The tool inherits stdin, stdout and stderr and no other file of berm's or of berm's caller:
// with the init's status pipe a tool could forge or garble the end of its own call.
func TestToolInheritsOnlyStdio(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	// A file berm's caller leaves open (not close-on-exec) for berm to inherit.
	leak, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--workspace", ws, "--",
		"/usr/bin/python3", "-c", "import os; print(' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))")
	cmd.ExtraFiles = []*os.File{leak, leak, leak, leak, leak, leak, leak}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("berm run: %v\n%s", err, out)
	}
	// 0-2, and the directory listdir itself opened.
	if got := strings.TrimSpace(string(out)); got != "0 1 2 3" {
		t.Fatalf("the tool holds files %q, want only 0 1 2 (and listdir's 3)", got)
	}
}

// One call id used by two tenants, and again by one of them after its call ended: three
// calls, each with its own key and its own trail; a bare id that names several calls is
// refused with their keys, TENANT/ID or a key names one.
func TestReusedCallIDIsADistinctCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state := t.TempDir()
	for i, tenant := range []string{"t1", "t2", "t1"} {
		ws := bermbin.Workspace(t)
		r := run(t, state, "--call-id", "same-id", "--tenant", tenant, "--workspace", ws, "--", "sh", "-c", fmt.Sprintf(": > mark-%d; rm mark-%d", i, i))
		if r.Exit != 0 {
			t.Fatalf("call %d: exit %d\n%s", i, r.Exit, r.Stderr)
		}
	}
	calls := bermbin.Calls(t, state)
	keys := map[string]bool{}
	for _, c := range calls {
		if c.Start.CallID != "same-id" || c.Start.CallKey == "" || c.Record == nil || c.Record.CallKey != c.Start.CallKey {
			t.Fatalf("call %+v: want id same-id, a key, and a record with the same key", c.Start)
		}
		keys[c.Start.CallKey] = true
	}
	if len(calls) != 3 || len(keys) != 3 {
		t.Fatalf("%d calls with %d keys, want 3 calls with 3 keys", len(calls), len(keys))
	}
	r := bermbin.Berm(t, nil, "timeline", "--state-dir", state, "same-id")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "several calls have this id") {
		t.Fatalf("timeline of an ambiguous id: exit %d, stderr %q; want a refusal naming the keys", r.Exit, r.Stderr)
	}
	for i, c := range calls {
		tl := bermbin.Timeline(t, state, c.Start.CallKey)
		seqs := map[uint64]bool{}
		for _, e := range tl.Events {
			if e.CallKey != c.Start.CallKey {
				t.Fatalf("call %s: event %d of call %s in its trail", c.Start.CallKey, e.Seq, e.CallKey)
			}
			if seqs[e.Seq] {
				t.Fatalf("call %s: sequence number %d twice", c.Start.CallKey, e.Seq)
			}
			seqs[e.Seq] = true
			if e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && e.Syscall.Path != fmt.Sprintf("mark-%d", i) {
				t.Fatalf("call %d's trail holds another call's deletion: %s", i, e.Syscall.Path)
			}
		}
	}
	if tl := bermbin.Timeline(t, state, "t2/same-id"); tl.Call.Start.Tenant != "t2" {
		t.Fatalf("t2/same-id named tenant %s's call", tl.Call.Start.Tenant)
	}
}

// berm's own sandbox set-up (the init's mounts, Landlock rules, seccomp) is marked phase
// setup: out of the record's counts and the default timeline, shown with --all.
func TestSetupIsNotTheToolsTrail(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	if r := run(t, state, "--call-id", "setup-1", "--workspace", ws, "--", "true"); r.Exit != 0 {
		t.Fatalf("exit %d\n%s", r.Exit, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "setup-1")
	for _, e := range tl.Events {
		if e.Phase == event.PhaseSetup {
			t.Fatalf("default timeline shows set-up event %d (%s)", e.Seq, e.Kind)
		}
	}
	if n := tl.Call.Record.Counts.Open; n > 16 {
		t.Errorf("a call running true counts %d opens: berm's set-up counted as the tool's", n)
	}
	// The kernel's per-call syscall counts too: the Landlock rules are berm's, not true's.
	if n := tl.Call.Record.Syscalls["landlock_add_rule"]; n != 0 {
		t.Errorf("a call running true counts %d landlock_add_rule: berm's set-up counted as the tool's", n)
	}
	if tl.Call.Record.Syscalls["exit_group"] == 0 {
		t.Errorf("the tool's own syscalls are not counted: %v", tl.Call.Record.Syscalls)
	}
	r := bermbin.Berm(t, nil, "timeline", "--state-dir", state, "--json", "--all", "setup-1")
	var all audit.TimelineJSON
	if err := json.Unmarshal([]byte(r.Stdout), &all); err != nil {
		t.Fatalf("timeline --all: %v\n%s", err, r.Stderr)
	}
	setup := 0
	for _, e := range all.Events {
		if e.Phase == event.PhaseSetup {
			setup++
		}
	}
	if setup == 0 || len(all.Events) != len(tl.Events)+setup {
		t.Errorf("--all: %d events, %d of them set-up; default: %d", len(all.Events), setup, len(tl.Events))
	}
}

// The journal and the workspace on one small file system, and a tool that writes it full:
// the call's record still lands (the journal's reserve is given up for it), and the next call
// is refused with the reason instead of running with a trail that cannot be written.
func TestToolFillingTheJournalsDisk(t *testing.T) {
	bermbin.RequireRoot(t)
	fs := t.TempDir()
	os.Chmod(fs, 0o755)
	if err := syscall.Mount("tmpfs", fs, "tmpfs", 0, "size=160m,mode=755"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(fs, syscall.MNT_DETACH)
	state, ws := filepath.Join(fs, "state"), filepath.Join(fs, "ws")
	os.Mkdir(ws, 0o755)
	os.Chown(ws, 65534, 65534)
	// The tool writes until the disk is full: it gets ENOSPC, or its disk budget ends it first
	// (the file system has no space left for it), whichever comes first.
	r := run(t, state, "--call-id", "filler", "--workspace", ws, "--", "sh", "-c", "cat /dev/zero > big; echo wrote $?")
	if !strings.Contains(r.Stdout, "wrote 1") && !strings.Contains(r.Stderr, "disk_limit") {
		t.Fatalf("the tool did not fill the disk: exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	var rec *event.CallRecord
	for _, c := range bermbin.Calls(t, state) {
		if c.Start.CallID == "filler" {
			rec = c.Record
		}
	}
	if rec == nil {
		t.Fatal("the call that filled the disk has no record in the journal")
	}
	r = run(t, state, "--call-id", "after", "--workspace", ws, "--", "true")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "refusing to start calls until there is room") {
		t.Fatalf("a call on the full disk: exit %d, stderr %q; want a refusal that says why", r.Exit, r.Stderr)
	}
	os.Remove(filepath.Join(ws, "big"))
	if r = run(t, state, "--call-id", "after-2", "--workspace", ws, "--", "true"); r.Exit != 0 {
		t.Fatalf("a call once there is room again: exit %d\n%s", r.Exit, r.Stderr)
	}
}
