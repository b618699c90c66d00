package main

import (
	"fmt"
	"time"

	"github.com/bermsec/berm/agent/audit"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// innocentSet sums up the trails and latencies of one set of innocent calls.
type innocentSet struct {
	n, complete, beside  int
	eventsMin, eventsMax uint64
	kernel, user         uint64 // dropped, all calls
	deletions            int    // distinct deletions in their timelines, all calls
	p50, p99             time.Duration
	reasons              []string
}

// summarize sums up the records and deletions of the calls tag-0..tag-(n-1); beside, when set,
// says whether a call ran entirely during the flood.
func summarize(recs map[string]audit.Call, dels map[string]int, tag string, lat []time.Duration, beside func(audit.Call) bool) innocentSet {
	s := innocentSet{n: len(lat), p50: benchkit.Pct(lat, .5), p99: benchkit.Pct(lat, .99)}
	for i := range lat {
		id := fmt.Sprintf("%s-%d", tag, i)
		c := record(recs, id)
		r := c.Record
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
		s.deletions += dels[id]
	}
	return s
}

type report struct {
	innocents, files, floodChunk int
	floodWall, floodCPU          time.Duration // the innocents' run beside the flood, and bermd's CPU in it
	base, flood                  innocentSet
	flooder, audited             audit.Call
	auditedN                     int
	auditWall, auditCPU          time.Duration
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
	fmt.Println("| innocent calls | no flood | beside the flood |")
	fmt.Println("|---|---|---|")
	b, f := r.base, r.flood
	fmt.Printf("| ran entirely within the flooder's call | - | %d of %d |\n", f.beside, f.n)
	fmt.Printf("| complete | %d of %d | %d of %d |\n", b.complete, b.n, f.complete, f.n)
	fmt.Printf("| events recorded per call (min-max) | %d-%d | %d-%d |\n", b.eventsMin, b.eventsMax, f.eventsMin, f.eventsMax)
	fmt.Printf("| deletions in their trails | %d of %d | %d of %d |\n", b.deletions, b.n*r.files, f.deletions, f.n*r.files)
	fmt.Printf("| dropped, kernel / agent (all calls) | %d / %d | **%d / %d** |\n", b.kernel, b.user, f.kernel, f.user)
	fmt.Printf("| latency p50 | %s | %s (x%.2f) |\n", benchkit.MS(b.p50), benchkit.MS(f.p50), ratio(f.p50, b.p50))
	fmt.Printf("| latency p99 | %s | %s (x%.2f) |\n", benchkit.MS(b.p99), benchkit.MS(f.p99), ratio(f.p99, b.p99))
	for _, why := range append(b.reasons, f.reasons...) {
		fmt.Printf("\nincomplete: %s\n", audit.Safe(why))
	}

	fr := r.flooder.Record
	fmt.Printf("\nThe flooder (default event budget %d: past it, its events are counted per kind and object):\n\n", defaultBudget)
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
	fmt.Printf("\ninnocent neighbour of a flood: **%d events lost**, %d of %d complete, %d of %d deletions recorded (target: 0 lost); ",
		lost, f.complete, f.n, f.deletions, f.n*r.files)
	fmt.Printf("its latency beside the flood: p50 x%.2f, p99 x%.2f\n\n", ratio(f.p50, b.p50), ratio(f.p99, b.p99))

	ar := r.audited.Record
	dropped := ar.Dropped.Kernel + ar.Dropped.User
	oneByOne := ar.Events - ar.Aggregated
	fmt.Printf("## Kernel to journal (one fully audited call: `sysloop %d`, getppid traced)\n\n", r.auditedN)
	fmt.Println("The call's event budget is above its syscalls, so each event is journalled one by one. Wall time is")
	fmt.Println("`berm run`, start to exit (the record is written after the call's last event is in the journal);")
	fmt.Println("bermd's CPU time is its utime+stime from /proc around the call (the probes' own cost is paid by")
	fmt.Println("the traced process: see the per-syscall cost below).")
	fmt.Println()
	fmt.Println("| figure | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| events journalled one by one (aggregated) | %d (%d) |\n", oneByOne, ar.Aggregated)
	fmt.Printf("| dropped: kernel / agent | %d / %d (%.2f%% of events) |\n", ar.Dropped.Kernel, ar.Dropped.User, 100*float64(dropped)/float64(ar.Events+dropped))
	fmt.Printf("| complete | %v %s |\n", ar.Complete, audit.Safe(ar.IncompleteReason))
	fmt.Printf("| wall time (berm run) / call duration | %s / %s |\n", benchkit.MS(r.auditWall), benchkit.MS(ar.End.Sub(ar.Start)))
	fmt.Printf("| bermd CPU time | %s |\n", benchkit.MS(r.auditCPU))
	fmt.Printf("| **events per second, wall** | **%.0f** |\n", float64(oneByOne)/r.auditWall.Seconds())
	fmt.Printf("| **events per CPU second of bermd (per core)** | **%.0f** |\n", float64(oneByOne)/r.auditCPU.Seconds())

	fmt.Printf("\n## Fully audited syscall cost (getppid, median of %d rounds)\n\n", r.rounds)
	fmt.Println("| where | ns per syscall | over no agent |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| no agent loaded | %.0f | - |\n", r.bare)
	fmt.Printf("| outside any call, agent loaded | %.0f | %+.0f |\n", r.outside, r.outside-r.bare)
	fmt.Printf("| inside a call, every syscall an event journalled one by one | %.0f | %+.0f |\n", r.traced, r.traced-r.bare)
	fmt.Printf("\nfully audited per-syscall overhead = **%.2f us** (target <= 1 us)\n", (r.traced-r.bare)/1000)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
