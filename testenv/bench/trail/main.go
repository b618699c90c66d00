// Command trail measures, in one run through one bermd, what the audit trail holds under load
// (issue 10): whether the innocent calls of one tenant lose events, or launch latency, while a
// call of another tenant floods the kernel's ring buffer; how many events per second, and per
// CPU second of bermd, go from the kernel to the journal for one fully audited call; and what a
// fully audited syscall costs. It prints a markdown report. Figures, not assertions.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// innocentScript creates and then deletes files: every deletion is an event of its own.
const innocentScript = `for i in $(seq %d); do : > f$i; done; rm -f f*`

// floodScript floods until told to stop: every getppid of sysloop is an event.
const floodScript = `while [ ! -e stop ]; do ./sysloop %d >/dev/null || exit; done`

// busyScript is the flood's peer: a call as CPU-bound as the flooder (the same 1-CPU cap), whose
// loop makes no event (its stat of the stop file is counted in the kernel, never sent). What the
// innocents lose beside it is the CPU's share; what they lose more beside the flood is the audit's.
const busyScript = `while [ ! -e stop-busy ]; do :; done`

func main() {
	bin := flag.String("bin", "bin", "directory with berm and bermd")
	innocents := flag.Int("innocents", 20, "innocent calls, with and without the flood")
	files := flag.Int("files", 200, "files each innocent call creates and deletes")
	rounds := flag.Int("rounds", 5, "rounds of each syscall cost measurement")
	audited := flag.Int("audited", 2_000_000, "syscalls of each fully audited call whose trail is timed")
	auditRounds := flag.Int("audited-rounds", 3, "fully audited calls timed")
	floodChunk := flag.Int("flood-chunk", 1_000_000, "syscalls of each sysloop the flooding call repeats")
	flag.Parse()
	berm, bermd := filepath.Join(*bin, "berm"), filepath.Join(*bin, "bermd")

	work, err := os.MkdirTemp("/run", "berm-bench-trail.")
	benchkit.Must(err)
	defer os.RemoveAll(work)
	benchkit.OnExit(func() { os.RemoveAll(work) })
	benchkit.Must(os.Chmod(work, 0o755))
	ws := benchkit.Workspace(work, "ws")
	sysloop := filepath.Join(ws, "sysloop")
	benchkit.BuildSysloop(sysloop)
	const loops, costCalls = 1_000_000, 200_000

	// Syscall cost with no agent on the machine, as testenv/bench/launch measures it.
	var bare []float64
	for i := 0; i < *rounds; i++ {
		bare = append(bare, float(benchkit.Output(sysloop, strconv.Itoa(loops))))
	}

	state := filepath.Join(work, "state")
	d := benchkit.StartDaemon(bermd, state, filepath.Join(work, "bermd.sock"))
	defer d.Stop()
	// The flooder runs with the default event budget (past it, its events are aggregated); the
	// audited call with a budget above its syscalls, so every event is journalled one by one.
	floodPol := writePolicy(work, "flood", 0)
	auditPol := writePolicy(work, "audited", 4*int64(*audited))
	run := func(id, tenant, workspace, pol string, args ...string) []string {
		a := []string{"run", "--socket", d.Socket, "--daemon", "required", "--call-id", id, "--tenant", tenant, "--workspace", workspace}
		if pol != "" {
			a = append(a, "--policy", pol)
		}
		return append(a, args...)
	}

	// Per-syscall cost: outside any call with the agent loaded, and inside a fully audited call.
	var outside, traced []float64
	for i := 0; i < *rounds; i++ {
		outside = append(outside, float(benchkit.Output(sysloop, strconv.Itoa(loops))))
		d.Settle()
		traced = append(traced, float(benchkit.Output(berm, run(fmt.Sprintf("cost-%d", i), "bench", ws, auditPol,
			"--trace-syscall", "getppid", "--", "./sysloop", strconv.Itoa(costCalls))...)))
	}

	// Kernel to journal: fully audited calls alone, bermd's CPU time around each.
	pid := d.Cmd.Process.Pid
	var audits []auditRun
	for i := 0; i < *auditRounds; i++ {
		d.Settle()
		cpu0, err := cpuTime(pid)
		benchkit.Must(err)
		t0 := time.Now()
		benchkit.Output(berm, run(fmt.Sprintf("audited-%d", i), "bench", ws, auditPol,
			"--trace-syscall", "getppid", "--", "./sysloop", strconv.Itoa(*audited))...)
		wall := time.Since(t0)
		cpu1, err := cpuTime(pid)
		benchkit.Must(err)
		audits = append(audits, auditRun{wall: wall, cpu: cpu1 - cpu0})
	}

	// The innocents alone, then beside the flood. The flooder repeats sysloop until the
	// innocents are done (a file in its workspace says so), so that every innocent runs beside it.
	base := runInnocents(d, berm, work, "base", *innocents, *files, run)
	d.Settle()
	flood := exec.Command(berm, run("flooder", "noisy", ws, floodPol, "--trace-syscall", "getppid", "--",
		"sh", "-c", fmt.Sprintf(floodScript, *floodChunk))...)
	flood.Stderr = os.Stderr
	benchkit.Must(flood.Start())
	benchkit.OnExit(func() { flood.Process.Kill() })
	floodDone := make(chan error, 1)
	go func() { floodDone <- flood.Wait() }()
	time.Sleep(time.Second) // the flood fills the ring before the first innocent starts
	fcpu0, err := cpuTime(pid)
	benchkit.Must(err)
	ft0 := time.Now()
	during := runInnocents(d, berm, work, "flood", *innocents, *files, run)
	floodWall := time.Since(ft0)
	fcpu1, err := cpuTime(pid)
	benchkit.Must(err)
	benchkit.Must(os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644))
	benchkit.Must(<-floodDone)

	// The same innocents beside the CPU-bound peer.
	d.Settle()
	busy := exec.Command(berm, run("busy", "busy", ws, floodPol, "--", "sh", "-c", busyScript)...)
	busy.Stderr = os.Stderr
	benchkit.Must(busy.Start())
	benchkit.OnExit(func() { busy.Process.Kill() })
	busyDone := make(chan error, 1)
	go func() { busyDone <- busy.Wait() }()
	time.Sleep(time.Second)
	nextToBusy := runInnocents(d, berm, work, "busy", *innocents, *files, run)
	benchkit.Must(os.WriteFile(filepath.Join(ws, "stop-busy"), nil, 0o644))
	benchkit.Must(<-busyDone)

	recs := records(berm, state)
	flooder := record(recs, "flooder")
	busyRec := record(recs, "busy")
	// An innocent ran beside the flood when its whole call lay within the flooder's.
	beside := func(c audit.Call) bool {
		return !c.Record.Start.Before(flooder.Record.Start) && !c.Record.End.After(flooder.Record.End)
	}
	keys := map[string]string{}
	for id, c := range recs {
		keys[c.Start.Key()] = id
	}
	tr := trails(state, keys)
	rep := report{
		innocents: *innocents, files: *files, floodChunk: *floodChunk, flooder: flooder,
		floodWall: floodWall, floodCPU: fcpu1 - fcpu0,
		base:  summarize(recs, tr, "base", base, nil),
		flood: summarize(recs, tr, "flood", during, beside),
		busy: summarize(recs, tr, "busy", nextToBusy, func(c audit.Call) bool {
			return !c.Record.Start.Before(busyRec.Record.Start) && !c.Record.End.After(busyRec.Record.End)
		}),
		audits: audits, auditedN: *audited,
		rounds: *rounds, bare: benchkit.Median(bare), outside: benchkit.Median(outside), traced: benchkit.Median(traced),
	}
	for i := range rep.audits {
		rep.audits[i].call = record(recs, fmt.Sprintf("audited-%d", i))
	}
	rep.print()
}

// runInnocents runs n innocent calls of tenant "quiet", one after another, each on a settled
// bermd and in a workspace of its own, and returns the latency of each (berm run, start to exit).
func runInnocents(d *benchkit.Daemon, berm, work, tag string, n, files int, run func(id, tenant, ws, pol string, args ...string) []string) []time.Duration {
	var lat []time.Duration
	for i := 0; i < n; i++ {
		ws := benchkit.Workspace(work, fmt.Sprintf("%s-%d", tag, i))
		d.Settle()
		t0 := time.Now()
		benchkit.Output(berm, run(fmt.Sprintf("%s-%d", tag, i), "quiet", ws, "", "--", "sh", "-c", fmt.Sprintf(innocentScript, files))...)
		lat = append(lat, time.Since(t0))
	}
	return lat
}

func float(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	benchkit.Must(err)
	return v
}

// writePolicy writes a policy that lets the tool run what is in its workspace (sysloop), with
// an event budget when budget > 0 (else the default).
func writePolicy(dir, name string, budget int64) string {
	pol := fmt.Sprintf("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bench-%s}\nspec:\n", name) +
		"  filesystem:\n    exec: [\"${WORKSPACE}\", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]\n"
	if budget > 0 {
		pol += fmt.Sprintf("  observability: {eventBudget: %d}\n", budget)
	}
	path := filepath.Join(dir, name+".yaml")
	benchkit.Must(os.WriteFile(path, []byte(pol), 0o644))
	return path
}

// defaultBudget is the event budget of the flooder (the policy names none).
const defaultBudget = agent.DefaultEventBudget
