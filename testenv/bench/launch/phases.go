package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// served are the times bermd logged for each call it served (its debug line "call served").
type served struct {
	mu    sync.Mutex
	calls map[string]servedTimes
}

type servedTimes struct{ accepted, request, launched, replied time.Time }

// follow reads bermd's log: "call served" lines are kept, the rest but debug goes to stderr.
func (s *served) follow(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="call served"`) {
			if !strings.Contains(line, "level=DEBUG") {
				fmt.Fprintln(os.Stderr, line)
			}
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		ns := func(k string) time.Time {
			n, _ := strconv.ParseInt(kv[k], 10, 64)
			return time.Unix(0, n)
		}
		s.mu.Lock()
		s.calls[kv["call_id"]] = servedTimes{ns("accepted_ns"), ns("request_ns"), ns("launched_ns"), ns("replied_ns")}
		s.mu.Unlock()
	}
}

func (s *served) get(id string) (servedTimes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.calls[id]
	return t, ok
}

// cliCall is one `berm run` as the benchmark saw it: when it executed berm and when berm exited.
type cliCall struct {
	id         string
	start, end time.Time
}

// phaseNames are a warm launch's phases, in order; their sum is the launch.
var phaseNames = []string{
	"front start: exec of berm to its connection accepted (Go start, flags, workspace, lock, connect)",
	"connect: stdio and request read by bermd",
	"policy compile: request to call start (policy loaded and compiled, workspace opened, warm sandbox claimed)",
	"registration: call start to the init's first traced syscall (registered with the agent, configuration sent)",
	"init set-up: the init's first syscall to the tool's exec (root, mounts, Landlock, seccomp, identity)",
	"tool exec: the tool's exec to its exit (/bin/true)",
	"end barrier: the tool's exit to its record (init status, cgroup emptied, last events through the pipeline)",
	"reply: record to reply written (record journaled, sent)",
	"front exit: reply written to berm's exit (reply read, berm exits)",
}

// breakdown splits each call into phaseNames, from the benchmark's own times, bermd's debug
// log and the call's timeline in the journal (its start, first event, tool exec and exit, end).
func breakdown(stateDir string, calls []cliCall, sv *served) ([][]time.Duration, error) {
	want := map[string]int{}
	for i, c := range calls {
		want[c.id] = i
	}
	type tl struct {
		start, end, first, exec, exit time.Time
		execPID                       uint32
	}
	tls := make([]tl, len(calls))
	_, err := journal.Scan(filepath.Join(stateDir, "journal"), journal.Position{}, func(r journal.Record) error {
		switch r.Type {
		case journal.TypeCallStart:
			s, err := journal.DecodeCallStart(r.Payload)
			if err == nil {
				if i, ok := want[s.CallID]; ok {
					tls[i].start = s.Start
				}
			}
		case journal.TypeEvents:
			evs, err := journal.DecodeEvents(r.Payload)
			if err != nil {
				return nil
			}
			for _, e := range evs {
				i, ok := want[e.CallID]
				if !ok {
					continue
				}
				t := &tls[i]
				if t.first.IsZero() || e.Time.Before(t.first) {
					t.first = e.Time
				}
				if e.Kind == event.KindExec && t.exec.IsZero() {
					t.exec, t.execPID = e.Time, e.PID
				}
				if e.Kind == event.KindExit && t.execPID != 0 && e.PID == t.execPID {
					t.exit = e.Time
				}
			}
		case journal.TypeCallEnd:
			rec, err := journal.DecodeCallEnd(r.Payload)
			if err == nil {
				if i, ok := want[rec.CallID]; ok {
					tls[i].end = rec.End
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out [][]time.Duration
	for i, c := range calls {
		t := tls[i]
		s, ok := sv.get(c.id)
		if !ok || t.start.IsZero() || t.end.IsZero() || t.exec.IsZero() || t.exit.IsZero() {
			continue
		}
		marks := []time.Time{c.start, s.accepted, s.request, t.start, t.first, t.exec, t.exit, t.end, s.replied, c.end}
		p := make([]time.Duration, len(marks)-1)
		for j := range p {
			p[j] = marks[j+1].Sub(marks[j])
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no call of %d has every phase's time in bermd's log and journal", len(calls))
	}
	return out, nil
}

func printBreakdown(rows [][]time.Duration, total []time.Duration) {
	fmt.Printf("### Per-phase breakdown of a warm launch (%d calls, p50 of each phase)\n\n", len(rows))
	fmt.Println("From the benchmark's own exec and exit times, bermd's debug log (`call served`, also the")
	fmt.Println("`berm_call_phase_seconds` histogram on its metrics) and each call's timeline (kernel event times).")
	fmt.Println()
	fmt.Println("| phase | p50 | p90 |")
	fmt.Println("|---|---|---|")
	var sum time.Duration
	for j, name := range phaseNames {
		col := make([]time.Duration, len(rows))
		for i, r := range rows {
			col[i] = r[j]
		}
		sum += benchkit.Pct(col, .5)
		fmt.Printf("| %s | %s | %s |\n", name, benchkit.MS(benchkit.Pct(col, .5)), benchkit.MS(benchkit.Pct(col, .9)))
	}
	fmt.Printf("| sum of the p50s (the launch's p50: %s) | %s | |\n\n", benchkit.MS(benchkit.Pct(total, .5)), benchkit.MS(sum))
}
