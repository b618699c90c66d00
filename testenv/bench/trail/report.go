package main

import (
	"fmt"
	"time"

	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// innocentSet sums up the trails and latencies of one set of innocent calls.
type innocentSet struct {
	n, complete, beside  int
	eventsMin, eventsMax uint64
	kernel, user         uint64 // dropped, all calls
	deletions            int    // distinct deletions in their timelines, all calls
	p50, p99             time.Duration
	run50, run99         time.Duration // the call itself, record start (sandbox set up) to end
	span50, span99       time.Duration // the tool, its first event to its last
	lead50, lead99       time.Duration // the sandbox set up to the tool\'s first event
	lag50, lag99         time.Duration // the call's end (its record) after its last event
	reasons              []string
}

// summarize sums up the records and deletions of the calls tag-0..tag-(n-1); beside, when set,
// says whether a call ran entirely during the flood.
func summarize(recs map[string]audit.Call, tr map[string]*trail, tag string, lat []time.Duration, beside func(audit.Call) bool) innocentSet {
	s := innocentSet{n: len(lat), p50: benchkit.Pct(lat, .5), p99: benchkit.Pct(lat, .99)}
	var runs, leads, spans, lags []time.Duration
	for i := range lat {
		id := fmt.Sprintf("%s-%d", tag, i)
		c := record(recs, id)
		r := c.Record
		runs = append(runs, r.End.Sub(r.Start))
		if i == 0 || r.Events < s.eventsMin {
			s.eventsMin = r.Events
		}
		s.eventsMax = max(s.eventsMax, r.Events)
		s.kernel += r.Dropped.Kernel
		s.user += r.Dropped.User
		if r.Complete {
			s.complete++
		} else {
			s.reasons = append(s.reasons, id+": "+r.IncompleteReason)
		}
		if beside != nil && beside(c) {
			s.beside++
		}
		if t := tr[id]; t != nil {
			s.deletions += t.deletions
			leads = append(leads, t.first.Sub(r.Start))
			spans = append(spans, t.last.Sub(t.first))
			lags = append(lags, r.End.Sub(t.last))
		} else {
			benchkit.Must(fmt.Errorf("call %s has no events in the journal", id))
		}
	}
	s.run50, s.run99 = benchkit.Pct(runs, .5), benchkit.Pct(runs, .99)
	s.lead50, s.lead99 = benchkit.Pct(leads, .5), benchkit.Pct(leads, .99)
	s.span50, s.span99 = benchkit.Pct(spans, .5), benchkit.Pct(spans, .99)
	s.lag50, s.lag99 = benchkit.Pct(lags, .5), benchkit.Pct(lags, .99)
	return s
}

// auditRun is one fully audited call, timed.
type auditRun struct {
	call      audit.Call
	wall, cpu time.Duration // berm run, start to exit; bermd's CPU time meanwhile
}

type report struct {
	innocents, files, floodChunk int
	floodWall, floodCPU          time.Duration // the innocents' run beside the flood, and bermd's CPU in it
	base, flood, busy            innocentSet   // alone, beside the flood, beside a CPU-bound call with no events
	flooder                      audit.Call
	audits                       []auditRun
	auditedN                     int
	rounds                       int
	bare, outside, traced        float64 // ns per getppid
}

func (r report) print() {
	fmt.Printf("## Audit trail beside a flood (%d innocent calls each way)\n\n", r.innocents)
	fmt.Printf("One bermd. A call of tenant `noisy` repeats `sysloop %d` with `--trace-syscall getppid` until\n", r.floodChunk)
	fmt.Println("the innocents are done: every syscall an event, more than the kernel's ring buffer and the agent")
	fmt.Printf("can take. Beside it, one after another, %d calls of tenant `quiet` (default policy) each create\n", r.innocents)
	fmt.Printf("and delete %d files; the same %d calls ran before the flood, with none. Each innocent launch waits\n", r.files, r.innocents)
	fmt.Println("for bermd to settle (no sandbox starting); its latency is `berm run`, start to exit. Deletions are")
	fmt.Println("counted in each call's trail in the journal (what `berm timeline` shows).")
	fmt.Println()
	fmt.Println("The third column is the flood's peer: the same innocents beside a call as CPU-bound as the")
	fmt.Println("flooder (same 1-CPU cap) whose loop makes no event. Beside the flood / beside the peer is what")
	fmt.Println("the flood's audit costs its neighbours over the CPU it takes.")
	fmt.Println()
	fmt.Println("| innocent calls | no flood | beside the flood | beside a CPU-bound call, no events |")
	fmt.Println("|---|---|---|---|")
	b, f, c := r.base, r.flood, r.busy
	fmt.Printf("| ran entirely within the neighbour's call | - | %d of %d | %d of %d |\n", f.beside, f.n, c.beside, c.n)
	fmt.Printf("| complete | %d of %d | %d of %d | %d of %d |\n", b.complete, b.n, f.complete, f.n, c.complete, c.n)
	fmt.Printf("| events recorded per call (min-max) | %d-%d | %d-%d | %d-%d |\n", b.eventsMin, b.eventsMax, f.eventsMin, f.eventsMax, c.eventsMin, c.eventsMax)
	fmt.Printf("| deletions in their trails | %d of %d | %d of %d | %d of %d |\n", b.deletions, b.n*r.files, f.deletions, f.n*r.files, c.deletions, c.n*r.files)
	fmt.Printf("| dropped, kernel / agent (all calls) | %d / %d | **%d / %d** | %d / %d |\n", b.kernel, b.user, f.kernel, f.user, c.kernel, c.user)
	fmt.Printf("| latency p50 | %s | %s (x%.2f) | %s (x%.2f) |\n", benchkit.MS(b.p50), benchkit.MS(f.p50), ratio(f.p50, b.p50), benchkit.MS(c.p50), ratio(c.p50, b.p50))
	fmt.Printf("| latency p99 | %s | %s (x%.2f) | %s (x%.2f) |\n", benchkit.MS(b.p99), benchkit.MS(f.p99), ratio(f.p99, b.p99), benchkit.MS(c.p99), ratio(c.p99, b.p99))
	row := func(name string, x func(innocentSet) (time.Duration, time.Duration)) {
		fmt.Printf("| %s (p50 / p99) |", name)
		for _, s := range []innocentSet{b, f, c} {
			p50, p99 := x(s)
			fmt.Printf(" %s / %s |", benchkit.MS(p50), benchkit.MS(p99))
		}
		fmt.Println()
	}
	row("of which the call, sandbox set up to record", func(s innocentSet) (time.Duration, time.Duration) { return s.run50, s.run99 })
	row("of which the start, sandbox set up to the tool's first event", func(s innocentSet) (time.Duration, time.Duration) { return s.lead50, s.lead99 })
	row("of which the tool, first event to last", func(s innocentSet) (time.Duration, time.Duration) { return s.span50, s.span99 })
	row("of which the end, last event to record", func(s innocentSet) (time.Duration, time.Duration) { return s.lag50, s.lag99 })
	for _, why := range append(append(b.reasons, f.reasons...), c.reasons...) {
		fmt.Printf("\nincomplete: %s\n", audit.Safe(why))
	}

	fr := r.flooder.Record
	fmt.Printf("\nThe flooder (default event budget %d: past it, its events are counted per kind and object, a flooding syscall in the kernel):\n\n", defaultBudget)
	fmt.Println("| flooder | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| call duration | %s |\n", benchkit.MS(fr.End.Sub(fr.Start)))
	fmt.Printf("| syscalls (kernel count) | %d |\n", fr.SyscallTotal)
	fmt.Printf("| events recorded (of which aggregated) | %d (%d) |\n", fr.Events, fr.Aggregated)
	fmt.Printf("| dropped, counted against it: kernel / agent | %d / %d |\n", fr.Dropped.Kernel, fr.Dropped.User)
	fmt.Printf("| complete | %v: %s |\n", fr.Complete, audit.Safe(fr.IncompleteReason))
	fmt.Printf("| CPU time of its cgroup (cap: %g CPUs) | %s |\n", fr.Limits.CPUs, benchkit.MS(time.Duration(fr.CPUTimeNs)))
	fmt.Printf("| bermd's CPU while the innocents ran beside it | %s in %s of wall time (%.0f%% of one core) |\n",
		benchkit.MS(r.floodCPU), benchkit.MS(r.floodWall), 100*r.floodCPU.Seconds()/r.floodWall.Seconds())

	lost := f.kernel + f.user
	verdict := "met"
	if lost != 0 || f.complete != f.n || f.deletions != f.n*r.files {
		verdict = "not met"
	}
	fmt.Printf("\ninnocent neighbour of a flood: **%d events lost**, %d of %d complete, %d of %d deletions recorded (target: 0 lost, every record complete: **%s**); ",
		lost, f.complete, f.n, f.deletions, f.n*r.files, verdict)
	fmt.Printf("its latency beside the flood: p50 x%.2f, p99 x%.2f; beside the flood over beside a CPU-bound call with no events (the audit's share): p50 x%.2f, p99 x%.2f (target: unchanged)\n\n",
		ratio(f.p50, b.p50), ratio(f.p99, b.p99), ratio(f.p50, c.p50), ratio(f.p99, c.p99))

	fmt.Printf("## Kernel to journal (fully audited calls alone: `sysloop %d`, getppid traced)\n\n", r.auditedN)
	fmt.Println("Each call's event budget is above its syscalls, so each event is journalled one by one. Wall time")
	fmt.Println("is `berm run`, start to exit (the record is written after the call's last event is in the journal);")
	fmt.Println("bermd's CPU time is its utime+stime from /proc around the call (the probes' own cost is paid by")
	fmt.Println("the traced process: see the per-syscall cost below). Events past what the agent takes are dropped")
	fmt.Println("and counted against the call: these rates are what one call's trail sustains when saturated.")
	fmt.Println()
	fmt.Println("| call | journalled one by one | dropped kernel / agent | drop rate | wall | bermd CPU | events/s wall | events per bermd CPU second |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	var perWall, perCPU []float64
	for i, a := range r.audits {
		ar := a.call.Record
		lost := ar.Dropped.Kernel + ar.Dropped.User
		kept := ar.Events - ar.Aggregated
		perWall = append(perWall, float64(kept)/a.wall.Seconds())
		perCPU = append(perCPU, float64(kept)/a.cpu.Seconds())
		fmt.Printf("| %d | %d | %d / %d | %.1f%% | %s | %s | %.0f | %.0f |\n", i, kept, ar.Dropped.Kernel, ar.Dropped.User,
			100*float64(lost)/float64(ar.Events+lost), benchkit.MS(a.wall), benchkit.MS(a.cpu), perWall[i], perCPU[i])
	}
	fmt.Printf("\nkernel to journal, one fully audited call (median of %d): **%.0f events/s** wall, **%.0f events per CPU second of bermd** (per core)\n",
		len(r.audits), benchkit.Median(perWall), benchkit.Median(perCPU))

	fmt.Printf("\n## Fully audited syscall cost (getppid, median of %d rounds)\n\n", r.rounds)
	fmt.Println("| where | ns per syscall | over no agent |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| no agent loaded | %.0f | - |\n", r.bare)
	fmt.Printf("| outside any call, agent loaded | %.0f | %+.0f |\n", r.outside, r.outside-r.bare)
	fmt.Printf("| inside a call, every syscall an event journalled one by one | %.0f | %+.0f |\n", r.traced, r.traced-r.bare)
	verdict = "met"
	if r.traced-r.bare > 1000 {
		verdict = "not met"
	}
	fmt.Printf("\nfully audited per-syscall overhead = **%.2f us** (target <= 1 us: **%s**)\n", (r.traced-r.bare)/1000, verdict)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
