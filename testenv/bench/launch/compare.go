package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// variantRun is one build's warm launches in a comparison, with the bare execs and bwrap
// launches interleaved with them.
type variantRun struct {
	label             string
	bin               string
	bare, bwrap, berm []time.Duration
	calls             []cliCall
	served            *served
	// blockRatios is each block's berm / bwrap overhead (p50s within the block): their spread
	// says how much of a difference between builds the machine's noise could make.
	blockRatios []float64
}

// compareWarm measures the warm launch of two builds in alternating blocks (A, B, A, B, ...),
// each launch interleaved with its own bare exec and bwrap launch, one bermd at a time: the
// machine's noise, which drifts over seconds on these shared 2-core machines, hits both builds
// alike. Prints each build's ratio and per-phase breakdown side by side.
func compareWarm(vs []*variantRun, work, ws, pol string, bwrapArgs []string, n, blocks int) {
	for _, v := range vs {
		v.served = &served{calls: map[string]servedTimes{}}
	}
	per := max(n/blocks, 1)
	for b := 0; b < blocks; b++ {
		for vi, v := range vs {
			state := filepath.Join(work, fmt.Sprintf("state-%d", vi))
			sock := filepath.Join(work, fmt.Sprintf("v%d.Socket", vi))
			_ = os.Remove(sock)
			d := startDaemon(filepath.Join(v.bin, "bermd"), state, sock)
			for i := 0; i < per; i++ {
				d.Settle()
				v.bare = append(v.bare, timeRun("/bin/true"))
				d.Settle()
				v.bwrap = append(v.bwrap, timeRun("bwrap", bwrapArgs...))
				d.Settle()
				id := fmt.Sprintf("cmp%d-%d-%d-%d", vi, os.Getpid(), b, i)
				start := time.Now()
				t := timeRun(filepath.Join(v.bin, "berm"), "run", "--socket", sock, "--daemon", "required", "--workspace", ws,
					"--policy", pol, "--call-id", id, "--", "/bin/true")
				v.berm = append(v.berm, t)
				v.calls = append(v.calls, cliCall{id, start, start.Add(t)})
			}
			d.Stop()
			from := len(v.bare) - per
			bb := benchkit.Pct(v.bare[from:], .5)
			v.blockRatios = append(v.blockRatios, float64(benchkit.Pct(v.berm[from:], .5)-bb)/float64(benchkit.Pct(v.bwrap[from:], .5)-bb))
			// Every block's daemon logged into its own map: the build's is their union.
			d.served.mu.Lock()
			for id, t := range d.served.calls {
				v.served.calls[id] = t
			}
			d.served.mu.Unlock()
		}
	}
	fmt.Printf("## Warm launch, %d builds in alternating blocks (%d blocks of %d launches each, interleaved with bare exec and bwrap)\n\n", len(vs), blocks, per)
	fmt.Println("| build | bare p50 | bwrap p50 | berm p50 | berm p90 | berm overhead over bare (p50) | bwrap overhead | berm / bwrap overhead |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, v := range vs {
		b50 := benchkit.Pct(v.bare, .5)
		o, ob := benchkit.Pct(v.berm, .5)-b50, benchkit.Pct(v.bwrap, .5)-b50
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %.2f |\n", v.label, benchkit.MS(b50), benchkit.MS(benchkit.Pct(v.bwrap, .5)), benchkit.MS(benchkit.Pct(v.berm, .5)),
			benchkit.MS(benchkit.Pct(v.berm, .9)), benchkit.MS(o), benchkit.MS(ob), float64(o)/float64(ob))
	}
	fmt.Println()
	fmt.Println("| build | block ratios (berm / bwrap overhead, p50s of each block): min | median | max | blocks where it is lower than the other build's same block |")
	fmt.Println("|---|---|---|---|---|")
	for vi, v := range vs {
		r := append([]float64(nil), v.blockRatios...)
		sort.Float64s(r)
		lower := 0
		if len(vs) == 2 {
			other := vs[1-vi].blockRatios
			for b, x := range v.blockRatios {
				if b < len(other) && x < other[b] {
					lower++
				}
			}
		}
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %d of %d |\n", v.label, r[0], r[len(r)/2], r[len(r)-1], lower, len(r))
	}
	fmt.Println()
	cols := make([][]time.Duration, len(vs)) // p50 of each phase, per build
	for vi, v := range vs {
		state := filepath.Join(work, fmt.Sprintf("state-%d", vi))
		rows, err := breakdown(state, v.calls, v.served)
		benchkit.Must(err)
		for j := range phaseNames {
			col := make([]time.Duration, len(rows))
			for i, r := range rows {
				col[i] = r[j]
			}
			cols[vi] = append(cols[vi], benchkit.Pct(col, .5))
		}
	}
	fmt.Print("| phase (p50) |")
	for _, v := range vs {
		fmt.Printf(" %s |", v.label)
	}
	fmt.Print("\n|---|")
	for range vs {
		fmt.Print("---|")
	}
	fmt.Println()
	for j, name := range phaseNames {
		fmt.Printf("| %s |", name)
		for vi := range vs {
			fmt.Printf(" %s |", benchkit.MS(cols[vi][j]))
		}
		fmt.Println()
	}
	fmt.Println()
}
