package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// A tool that leaves processes behind to outlive its call (a setsid'd writer into the
// workspace, thirty double-forked orphans, one that ignores every catchable signal) does not
// get them past its record: bermd ends the call as soon as the init reports (it reaps them
// itself, not waiting for its own exit), and by then every one of them is gone, its exit is in
// the trail, and the workspace no longer changes.
func TestDaemonEndsEveryProcessBeforeItsRecord(t *testing.T) {
	d := startDaemon(t)
	d.settled(t)
	ws := bermbin.Workspace(t)
	const marker = "9876543"
	script := `setsid sh -c 'while :; do echo x >> ticks; sleep 0.01; done' </dev/null >/dev/null 2>&1 &
for i in $(seq 30); do (sleep ` + marker + ` &); done
sh -c 'trap "" TERM INT HUP QUIT USR1 USR2; exec sleep ` + marker + `' &
sleep 0.3
exit 3`
	r := d.run(t, "", "--call-id", "leaves-daemons", "--workspace", ws, "--", "sh", "-c", script)
	if r.Exit != 3 {
		t.Fatalf("exit %d, want the tool's 3: %s", r.Exit, r.Stderr)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), marker) {
			t.Errorf("a process of the call outlived its reply: %s %q", p, b)
		}
	}
	ticks := filepath.Join(ws, "ticks")
	before, err := os.Stat(ticks)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if after, _ := os.Stat(ticks); after.Size() != before.Size() {
		t.Errorf("the workspace changed after the call's reply: ticks %d -> %d bytes", before.Size(), after.Size())
	}

	c := d.call(t, "leaves-daemons")
	if !c.Record.Complete {
		t.Fatalf("record incomplete: %s", c.Record.IncompleteReason)
	}
	forked, exited := map[uint32]bool{}, map[uint32]bool{}
	for _, e := range bermbin.Timeline(t, d.state, "leaves-daemons").Events {
		switch {
		case e.Kind == event.KindFork && e.Fork != nil:
			forked[e.Fork.ChildPID] = true
		case e.Kind == event.KindExit:
			exited[e.PID] = true
		}
	}
	if len(forked) < 32 {
		t.Fatalf("%d forks in the trail, want the tool's 32 at least", len(forked))
	}
	for pid := range forked {
		if !exited[pid] {
			t.Errorf("process %d forked in the call has no exit in its trail", pid)
		}
	}
}
