package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
)

// nonMatchingRules writes n rules on the corpus's commonest kinds (exec and open) that can
// never match it: exec rules on programs it never runs, open rules below a directory it never
// opens. With the index (index.go) they sit in buckets no corpus event looks up.
func nonMatchingRules(b *testing.B, n int) *Set {
	var extra strings.Builder
	extra.WriteString("rules:\n")
	for i := 0; i < n; i++ {
		cond := fmt.Sprintf(`exec.exe_name == "never-run-%d" && exec.argv.size() > 1`, i)
		test := fmt.Sprintf(`{exec: {filename: /x, exe_name: never-run-%d, argv: [a, b]}}`, i)
		if i%2 == 1 {
			cond = fmt.Sprintf(`file.path.startsWith("/never-opened-%d/") && file.write`, i)
			test = fmt.Sprintf(`{open: {path: /never-opened-%d/x, flags: 1}}`, i)
		}
		fmt.Fprintf(&extra, "  - {id: nonmatching-%d, title: t, description: d, severity: low, surface: policy, technique: T1059,\n"+
			"     condition: '%s', output: x,\n     tests: {match: [%s], nomatch: [{exec: {filename: /bin/true, exe_name: \"true\"}}]}}\n", i, cond, test)
	}
	path := filepath.Join(b.TempDir(), "nonmatching.yaml")
	if err := os.WriteFile(path, []byte(extra.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	set, err := LoadWithShipped(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range set.RunTests() {
		if r.Failed() {
			b.Fatal(r)
		}
	}
	return set
}

// BenchmarkEngineNonMatchingRules replays the recorded corpus through the full shipped ruleset
// and through it plus 500 rules that cannot match the corpus, interleaved in the same run, and
// reports both rates and their ratio (1.0: the 500 rules cost nothing).
func BenchmarkEngineNonMatchingRules(b *testing.B) {
	corpus := loadCorpus(b)
	full, err := Shipped()
	if err != nil {
		b.Fatal(err)
	}
	more := nonMatchingRules(b, 500)
	engs := []*Engine{NewEngine(full, nil), NewEngine(more, nil)}
	evs := make([]event.Event, len(corpus))
	copy(evs, corpus)
	var spent [2]time.Duration
	var n int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, eng := range engs {
			t := time.Now()
			for k := range evs {
				eng.Eval(&evs[k])
			}
			spent[j] += time.Since(t)
		}
		n += len(evs)
	}
	b.ReportMetric(float64(n)/spent[0].Seconds(), "shipped-events/s")
	b.ReportMetric(float64(n)/spent[1].Seconds(), "plus500-events/s")
	b.ReportMetric(spent[1].Seconds()/spent[0].Seconds(), "cost-ratio")
	b.ReportMetric(float64(full.Len()), "shipped-rules")
}
