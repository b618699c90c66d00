package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
)

// neighbourPolicy lets the tool run what it builds in its workspace (the flooder).
func neighbourPolicy(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "neighbour.yaml")
	pol := `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: neighbour}
spec:
  filesystem:
    exec: ["${WORKSPACE}", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]
`
	if err := os.WriteFile(p, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// innocentScript creates and then deletes 200 files: every unlink must be in its trail.
const innocentScript = `for i in $(seq 200); do : > f$i; done; rm -f f*; echo done`

var fileRE = regexp.MustCompile(`^f[0-9]+$`)

// checkInnocent asserts the innocent call's trail is whole: complete, nothing dropped, and each
// of its 200 deletions recorded.
func checkInnocent(t *testing.T, d *bermd, id string) {
	t.Helper()
	c := d.call(t, id)
	rec := c.Record
	if !rec.Complete || rec.Dropped.Kernel != 0 || rec.Dropped.User != 0 {
		t.Errorf("innocent call %s: complete %v (%s), dropped %+v; want complete with 0 dropped", id, rec.Complete, rec.IncompleteReason, rec.Dropped)
	}
	unlinks := map[string]bool{}
	for _, e := range bermbin.Timeline(t, d.state, id).Events {
		if e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && e.Syscall.Result == 0 && fileRE.MatchString(e.Syscall.Path) {
			unlinks[e.Syscall.Path] = true
		}
	}
	if len(unlinks) != 200 {
		t.Errorf("innocent call %s: %d of its 200 deletions in its trail", id, len(unlinks))
	}
}

// checkHonest asserts a record claims no more than it has: incomplete with a reason and a
// count whenever something is missing.
func checkHonest(t *testing.T, c audit.Call) {
	t.Helper()
	rec := c.Record
	lost := rec.Dropped.Kernel + rec.Dropped.User
	if rec.Complete != (lost == 0 && rec.IncompleteReason == "") {
		t.Errorf("call %s: complete=%v with %d dropped and reason %q", c.Start.CallID, rec.Complete, lost, rec.IncompleteReason)
	}
	// A trail with events lost is degraded observability: a flood cannot leave the surface
	// looking enforced.
	obs := rec.Surfaces[len(rec.Surfaces)-1]
	if obs.Surface != event.SurfaceObservability || (obs.State == event.StateDegraded) == rec.Complete {
		t.Errorf("call %s: complete=%v, observability surface %+v", c.Start.CallID, rec.Complete, obs)
	}
}

// floodScript floods until the file stop appears in its workspace: every getppid of sysloop is
// an event, far more than the ring and the agent can take, for as long as the innocents run.
// It says when it is flooding (the file flooding: a million getppid made, far past its event
// budget), however long that took on a loaded machine, and floods on until told to stop.
const floodScript = `./sysloop 1000000 >/dev/null || exit; : > flooding; while [ ! -e stop ]; do ./sysloop 100000 >/dev/null || exit; done`

// A call that floods the shared ring buffer (every syscall an event, tens of millions of them,
// for as long as its neighbours run) beside innocent calls of another tenant, one after
// another: every innocent record is complete, with 0 dropped and every deletion in its trail.
// Each call's records go from the ring reader to its own worker (a call's end waits for its own
// records only, never behind the flood's), and past its budget the flood is counted in the
// kernel instead of decoded. Before, the innocents' ends waited behind the flood's records in
// the one queue to the decoder and gave up at 5 s, incomplete. The flooder's record accounts
// for every getppid it made: recorded, aggregated (in the agent or the kernel) or dropped.
func TestFloodingNeighbourTakesNothingFromAnother(t *testing.T) {
	d := startDaemon(t)
	pol := neighbourPolicy(t)
	ws := bermbin.Workspace(t)
	build := exec.Command("go", "build", "-o", filepath.Join(ws, "sysloop"), "./testenv/bench/sysloop")
	build.Dir = bermbin.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sysloop: %v\n%s", err, out)
	}
	var wg sync.WaitGroup
	var flood bermbin.Result
	wg.Add(1)
	ended := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(ended)
		flood = d.run(t, "", "--call-id", "flooder", "--tenant", "noisy", "--workspace", ws, "--policy", pol,
			"--trace-syscall", "getppid", "--", "sh", "-c", floodScript)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644); err != nil {
				t.Error(err)
			}
			wg.Wait()
		}
	}
	defer stop()
	// The innocents start once the flood is flooding (past its budget, filling the ring),
	// however long a loaded machine takes to get there, and the flood goes on until they end.
	for {
		if _, err := os.Stat(filepath.Join(ws, "flooding")); err == nil {
			break
		}
		select {
		case <-ended:
			t.Fatalf("the flooder ended before it flooded: exit %d\n%s", flood.Exit, flood.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	const innocents = 5
	for i := range innocents {
		iws := bermbin.Workspace(t)
		id := fmt.Sprintf("innocent-%d", i)
		if r := d.run(t, "", "--call-id", id, "--tenant", "quiet", "--workspace", iws, "--", "sh", "-c", innocentScript); r.Exit != 0 {
			t.Fatalf("innocent call: exit %d\n%s", r.Exit, r.Stderr)
		}
	}
	stop()
	if flood.Exit != 0 {
		t.Fatalf("flooder: exit %d\n%s", flood.Exit, flood.Stderr)
	}
	fc := d.call(t, "flooder")
	for i := range innocents {
		id := fmt.Sprintf("innocent-%d", i)
		checkInnocent(t, d, id)
		c := d.call(t, id)
		if c.Record.Start.Before(fc.Record.Start) || c.Record.End.After(fc.Record.End) {
			t.Errorf("innocent call %s (%v to %v) did not run within the flood (%v to %v)", id,
				c.Record.Start, c.Record.End, fc.Record.Start, fc.Record.End)
		}
	}
	checkHonest(t, fc)
	rec := fc.Record
	made := rec.Syscalls["getppid"]
	t.Logf("flooder: %d getppid, %d syscall events (%d aggregated), dropped %+v", made, rec.Counts.Syscall, rec.Aggregated, rec.Dropped)
	// It flooded while they ran: a million getppid before the first innocent started, far
	// past its budget, and more until the last one ended (it ran within the flood, above).
	if made < 1_000_000 || rec.Aggregated == 0 {
		t.Fatalf("the flooder made %d getppid, %d aggregated: it never passed its budget, this test proves nothing", made, rec.Aggregated)
	}
	// Every getppid is in the record: one by one, aggregated, or dropped and counted.
	if got := rec.Counts.Syscall + rec.Dropped.Kernel + rec.Dropped.User; got < made {
		t.Errorf("flooder: %d syscall events + %+v dropped account for %d of its %d getppid", rec.Counts.Syscall, rec.Dropped, got, made)
	}
}

// A call whose events are slow to judge (thousands of failed opens through a chain of
// symlinks, each resolved on the host) beside an innocent call of another tenant: the
// innocent call's trail is whole and its end is not held up; the slow call's record says
// what it misses, if anything.
func TestStallingNeighbourHoldsNobodyUp(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	staller := `import os
for i in range(40):
    os.symlink("l%d" % (i + 1), "l%d" % i)
os.mkdir("l40")
p = "/".join(["l0"] * 8)
for i in range(30000):
    try:
        os.open("%s/nx%d" % (p, i), os.O_RDONLY)
    except OSError:
        pass
`
	var wg sync.WaitGroup
	var slow bermbin.Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		slow = d.run(t, "", "--call-id", "staller", "--tenant", "noisy", "--workspace", ws, "--", "python3", "-c", staller)
	}()
	time.Sleep(time.Second)
	iws := bermbin.Workspace(t)
	if r := d.run(t, "", "--call-id", "innocent", "--tenant", "quiet", "--workspace", iws, "--", "sh", "-c", innocentScript); r.Exit != 0 {
		t.Fatalf("innocent call: exit %d\n%s", r.Exit, r.Stderr)
	}
	checkInnocent(t, d, "innocent")
	wg.Wait()
	if slow.Exit != 0 {
		t.Fatalf("staller: exit %d\n%s", slow.Exit, slow.Stderr)
	}
	sc := d.call(t, "staller")
	checkHonest(t, sc)
	if sc.Record.Counts.Open+sc.Record.Aggregated+sc.Record.Dropped.User+sc.Record.Dropped.Kernel < 30000 {
		t.Errorf("staller: %d opens + %d aggregated + %+v dropped: its 30000 failed opens are not all accounted for",
			sc.Record.Counts.Open, sc.Record.Aggregated, sc.Record.Dropped)
	}
}

// Past its event budget, a call's flooding syscall is counted in the kernel instead of being
// reported one by one, and the record still accounts for every one: the events recorded, the
// aggregate (in the agent and in the kernel) and nothing dropped add up to the kernel's own
// count. A refusal past the budget is still an event of its own.
func TestFloodPastBudgetIsCountedInTheKernel(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	build := exec.Command("go", "build", "-o", filepath.Join(ws, "sysloop"), "./testenv/bench/sysloop")
	build.Dir = bermbin.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sysloop: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "budget.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: budget}
spec:
  observability: {eventBudget: 1000}
  filesystem:
    exec: ["${WORKSPACE}", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 500_000
	if r := d.run(t, "", "--call-id", "past-budget", "--workspace", ws, "--policy", pol,
		"--trace-syscall", "getppid", "--", "./sysloop", fmt.Sprint(n)); r.Exit != 0 {
		t.Fatalf("exit %d\n%s", r.Exit, r.Stderr)
	}
	c := d.call(t, "past-budget")
	rec := c.Record
	if !rec.Complete || rec.Dropped.Kernel+rec.Dropped.User != 0 {
		t.Fatalf("record complete %v (%s), dropped %+v: want complete, nothing dropped", rec.Complete, rec.IncompleteReason, rec.Dropped)
	}
	one, aggregated := 0, uint64(0)
	for _, e := range bermbin.Timeline(t, d.state, "past-budget").Events {
		switch {
		case e.Syscall != nil && e.Syscall.Name == "getppid":
			one++
		case e.Aggregate != nil && e.Aggregate.Object == "getppid":
			aggregated += e.Aggregate.Count
		}
	}
	if made := rec.Syscalls["getppid"]; uint64(one)+aggregated != made || made < n {
		t.Errorf("%d getppid recorded one by one + %d aggregated, the kernel counted %d (the tool made at least %d)", one, aggregated, made, n)
	}
	// The agent saw the budget, then what the kernel sent before the agent told it the budget
	// was spent (tens of thousands on a loaded machine), not the half million: the kernel
	// counted the rest.
	if rec.Events > n/4 {
		t.Errorf("%d events went through the agent for %d getppid: the flood past the budget was not counted in the kernel", rec.Events, n)
	}
}
