package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/bermsec/berm/agent/audit"
	"github.com/bermsec/berm/agent/journal"
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

// deletions counts, for each call of keys (call key -> caller's id), the distinct successful
// unlinks of the innocent script's files in its trail: the events a lossy trail would miss
// first, each one its own event. One pass over the journal, as `berm timeline` reads it, for
// all the calls at once.
func deletions(state string, keys map[string]string) map[string]int {
	seen := map[string]map[string]bool{}
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
			if !ok || e.Syscall == nil || !strings.HasPrefix(e.Syscall.Name, "unlink") || e.Syscall.Result != 0 || !fileRE.MatchString(e.Syscall.Path) {
				continue
			}
			if seen[id] == nil {
				seen[id] = map[string]bool{}
			}
			seen[id][e.Syscall.Path] = true
		}
		return nil
	})
	benchkit.Must(err)
	if len(res.Problems) > 0 {
		benchkit.Must(fmt.Errorf("journal has %d damaged records, first: %s", len(res.Problems), res.Problems[0]))
	}
	n := map[string]int{}
	for id, s := range seen {
		n[id] = len(s)
	}
	return n
}
