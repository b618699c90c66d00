package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// records reads every finished call of a state dir, by call id, as `berm calls` shows them.
func records(berm, state string) map[string]audit.Call {
	var calls []audit.Call
	benchkit.Must(json.Unmarshal([]byte(benchkit.Output(berm, "calls", "--state-dir", state, "--json")), &calls))
	m := map[string]audit.Call{}
	for _, c := range calls {
		if c.Record != nil {
			m[c.Start.CallID] = c
		}
	}
	return m
}

// record is one call's record; a call without one ends the benchmark.
func record(m map[string]audit.Call, id string) audit.Call {
	c, ok := m[id]
	if !ok {
		benchkit.Must(fmt.Errorf("call %s has no record in the journal", id))
	}
	return c
}

var fileRE = regexp.MustCompile(`^f[0-9]+$`)

// trail is what the benchmark reads from one call's events.
type trail struct {
	deletions   int       // distinct successful unlinks of the innocent script's files
	first, last time.Time // the call's first and last event of the tool, as the kernel timed them
}

// trails reads, for each call of keys (call key -> caller's id), its events in the journal, as
// `berm timeline` reads them, in one pass for all the calls at once. Deletions are the events a
// lossy trail would miss first (each one its own event); first and last tell how long the tool
// ran and how long its call took to end after its last event.
func trails(state string, keys map[string]string) map[string]*trail {
	out := map[string]*trail{}
	seen := map[string]bool{}
	res, err := journal.Scan(filepath.Join(state, "journal"), journal.Position{}, func(r journal.Record) error {
		if r.Type != journal.TypeEvents {
			return nil
		}
		batch, err := journal.DecodeEvents(r.Payload)
		if err != nil {
			return fmt.Errorf("journal record at %s: %w", r.Pos, err)
		}
		for _, e := range batch {
			id, ok := keys[e.Key()]
			if !ok || e.Phase == event.PhaseSetup || e.Kind == event.KindAggregate || e.Kind == event.KindDrop {
				continue
			}
			t := out[id]
			if t == nil {
				t = &trail{first: e.Time}
				out[id] = t
			}
			if e.Time.Before(t.first) {
				t.first = e.Time
			}
			if e.Time.After(t.last) {
				t.last = e.Time
			}
			if e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && e.Syscall.Result == 0 && fileRE.MatchString(e.Syscall.Path) && !seen[id+"\x00"+e.Syscall.Path] {
				seen[id+"\x00"+e.Syscall.Path] = true
				t.deletions++
			}
		}
		return nil
	})
	benchkit.Must(err)
	if len(res.Problems) > 0 {
		benchkit.Must(fmt.Errorf("journal has %d damaged records, first: %s", len(res.Problems), res.Problems[0]))
	}
	return out
}
