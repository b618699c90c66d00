package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// BenchmarkEngine runs recorded real events (testdata/corpus.json.gz) through the engine on
// one goroutine and reports events/s: with the full shipped ruleset, and with one shipped rule,
// to show that rules which cannot match an event's kind (or syscall) cost it nothing.
func BenchmarkEngine(b *testing.B) {
	corpus := loadCorpus(b)
	full, err := Shipped()
	if err != nil {
		b.Fatal(err)
	}
	one := subset(full, "escape-proc-mem")
	// 200 more rules on a kind that is rare in the corpus (connect): the index must keep their
	// cost off every other event.
	var extra strings.Builder
	extra.WriteString("rules:\n")
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&extra, `  - {id: extra-%d, title: t, description: d, severity: low, surface: policy, technique: T1046,
     condition: 'net.port == %d && net.addr.startsWith("10.")', output: x,
     tests: {match: [{connect: {family: inet, addr: 10.0.0.1, port: %d}}], nomatch: [{connect: {family: inet, addr: 10.0.0.1, port: 1}}]}}
`, i, 20000+i, 20000+i)
	}
	path := filepath.Join(b.TempDir(), "extra.yaml")
	if err := os.WriteFile(path, []byte(extra.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	more, err := LoadWithShipped(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		set  *Set
	}{
		{"shipped", full},
		{"shipped+200-connect-rules", more},
		{"one-rule", one},
	} {
		b.Run(bc.name, func(b *testing.B) {
			eng := NewEngine(bc.set, nil)
			evs := make([]event.Event, len(corpus))
			copy(evs, corpus)
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for i := 0; i < b.N; i++ {
				eng.Eval(&evs[i%len(evs)])
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(bc.set.Len()), "rules")
		})
	}
}

// subset is a set holding only the named rules of s.
func subset(s *Set, ids ...string) *Set {
	out := &Set{files: s.files}
	for _, id := range ids {
		if r := s.Rule(id); r != nil {
			out.rules = append(out.rules, r)
		}
	}
	out.reindex()
	return out
}

// BenchmarkLoadShipped is the shipped set's load and compile: what `berm run --daemon never`
// and bermd pay at their start before the first call.
func BenchmarkLoadShipped(b *testing.B) {
	for b.Loop() {
		if _, err := Shipped(); err != nil {
			b.Fatal(err)
		}
	}
}
