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

	"github.com/bermsec/berm/agent/audit"
	"github.com/bermsec/berm/agent/event"
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

// A call that floods the shared ring buffer (every syscall an event, millions of them) beside
// an innocent call of another tenant: the flooder loses events (counted against it), the
// innocent call loses none. Fairness is the kernel's (a call holding more than its share of a
// ring more than half full gets no more) and the decoder's (each call's events are judged and
// journalled on its own worker).
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
	go func() {
		defer wg.Done()
		flood = d.run(t, "", "--call-id", "flooder", "--tenant", "noisy", "--workspace", ws, "--policy", pol,
			"--trace-syscall", "getppid", "--", "./sysloop", "4000000")
	}()
	time.Sleep(time.Second) // let the flood fill the ring (not a timing assertion)
	for i := range 3 {
		iws := bermbin.Workspace(t)
		id := fmt.Sprintf("innocent-%d", i)
		if r := d.run(t, "", "--call-id", id, "--tenant", "quiet", "--workspace", iws, "--", "sh", "-c", innocentScript); r.Exit != 0 {
			t.Fatalf("innocent call: exit %d\n%s", r.Exit, r.Stderr)
		}
		checkInnocent(t, d, id)
	}
	wg.Wait()
	if flood.Exit != 0 {
		t.Fatalf("flooder: exit %d\n%s", flood.Exit, flood.Stderr)
	}
	fc := d.call(t, "flooder")
	checkHonest(t, fc)
	if fc.Record.Dropped.Kernel == 0 {
		t.Fatalf("the flood never filled the ring (dropped %+v): this test proves nothing; make it bigger", fc.Record.Dropped)
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
