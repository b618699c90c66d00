package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// soak runs total calls through one bermd, floods among them (a call that makes 100k failed
// opens, one that fork-bombs into its pids cap, one that writes until its output cap), then
// measures that bermd's launch latency interleaved with a fresh bermd's. Bounded by limit: a
// soak that runs out of time reports the calls it made.
// With profile set, CPU profiles of the soaked bermd (pprof) while it launches before and
// after the soak go to profile.before and profile.after; profiling slows the soaked bermd
// down (its signals), so its figures are then not the fresh one's peers.
func soak(bermd, berm, ws, pol string, total, m int, limit time.Duration, profile string) {
	dir, err := os.MkdirTemp("/var/tmp", "berm-soak.")
	benchkit.Must(err)
	benchkit.OnExit(func() { os.RemoveAll(dir) })
	defer os.RemoveAll(dir)
	dS := startDaemon(bermd, filepath.Join(dir, "soaked"), filepath.Join(dir, "soaked.sock"), "--pprof")
	defer dS.Stop()
	call := func(d *daemon, extra ...string) []string {
		return append([]string{"run", "--socket", d.Socket, "--daemon", "required", "--workspace", ws, "--policy", pol}, extra...)
	}
	// A flood ends with its cap (a non-zero status): only berm's own failure (1) is an error.
	flood := func(d *daemon, args ...string) {
		cmd := exec.Command(berm, call(d, args...)...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() == 1 {
			benchkit.Must(fmt.Errorf("flood %v: %v: %s", args, err, out))
		}
	}
	floods := []struct {
		name string
		args []string
	}{
		{"100k failed opens", []string{"--", "./sysloop", "100000", "open", "/nonexistent/berm-soak"}},
		{"fork bomb into a pids cap of 64", []string{"--pids", "64", "--", "/bin/sh", "-c", "f() { f | f & }; f; wait"}},
		{"output until a 32 MiB cap", []string{"--output-limit", "32Mi", "--", "/usr/bin/yes"}},
	}
	alone := func(d *daemon, profileTo string) []time.Duration {
		var prof sync.WaitGroup
		if profileTo != "" {
			prof.Add(1)
			go func() {
				defer prof.Done()
				d.cpuProfile(profileTo, 5*time.Second)
			}()
		}
		t := make([]time.Duration, 0, m)
		for i := 0; i < m; i++ {
			d.Settle()
			t = append(t, timeRun(berm, call(d, "--", "/bin/true")...))
		}
		prof.Wait()
		return t
	}
	suffix := func(s string) string {
		if profile == "" {
			return ""
		}
		return profile + "." + s
	}
	before := alone(dS, suffix("before"))

	start := time.Now()
	var next, done, flooded atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(total) || time.Since(start) > limit {
					return
				}
				if i%500 == 0 { // 20 floods per 10k calls, the three kinds in turn
					flood(dS, floods[(i/500)%3].args...)
					flooded.Add(1)
				} else {
					// Calls of several tenants: the soaked bermd keeps a warm sandbox for each.
					timeRun(berm, call(dS, "--tenant", fmt.Sprintf("soak-%d", i%soakTenants), "--", "/bin/true")...)
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	rssS, gorS := dS.Metric("process_resident_memory_bytes"), dS.Metric("go_goroutines")
	after := alone(dS, suffix("after"))

	// Both at once, interleaved: the same moment's noise for both. Two agents loaded make
	// every syscall of the machine run both sets of tracepoints, so these are slower than
	// either alone.
	dF := startDaemon(bermd, filepath.Join(dir, "fresh"), filepath.Join(dir, "fresh.sock"))
	defer dF.Stop()
	var tS, tF []time.Duration
	for i := 0; i < m; i++ {
		dS.Settle()
		tS = append(tS, timeRun(berm, call(dS, "--", "/bin/true")...))
		dF.Settle()
		tF = append(tF, timeRun(berm, call(dF, "--", "/bin/true")...))
	}
	dS.Stop()
	fresh := alone(dF, "")
	rssF, gorF := dF.Metric("process_resident_memory_bytes"), dF.Metric("go_goroutines")
	journal := dirSize(filepath.Join(dir, "soaked", "journal"))

	ratio := float64(benchkit.Pct(after, .5)) / float64(benchkit.Pct(fresh, .5))
	fmt.Printf("## Latency after a soak (%d calls, %d of them floods, in %s)\n\n", done.Load(), flooded.Load(), took.Round(time.Second))
	fmt.Printf("One bermd runs %d calls of `berm run -- /bin/true` (%d tenants in turn) from 2 callers at once, and every 500th a\n", total, soakTenants)
	fmt.Println("flood in turn: " + floods[0].name + "; " + floods[1].name + "; " + floods[2].name + ".")
	fmt.Printf("Then its warm launches (%d, settled) alone, interleaved with a fresh bermd's (both loaded), and\n", m)
	fmt.Println("the fresh bermd's alone once the soaked one has stopped.")
	fmt.Println()
	if done.Load() < int64(total) {
		fmt.Printf("(the soak stopped at its time limit of %s)\n\n", limit)
	}
	fmt.Println("| bermd | p50 | p99 | RSS | goroutines |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| soaked, before the soak, alone | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(before, .5)), benchkit.MS(benchkit.Pct(before, .99)))
	fmt.Printf("| **soaked, after the soak, alone** (journal %.0f MB) | %s | %s | %.0f MB | %.0f |\n", float64(journal)/1e6, benchkit.MS(benchkit.Pct(after, .5)), benchkit.MS(benchkit.Pct(after, .99)), rssS/1e6, gorS)
	fmt.Printf("| **fresh, alone** | %s | %s | %.0f MB | %.0f |\n", benchkit.MS(benchkit.Pct(fresh, .5)), benchkit.MS(benchkit.Pct(fresh, .99)), rssF/1e6, gorF)
	fmt.Printf("| soaked, interleaved with the fresh one | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(tS, .5)), benchkit.MS(benchkit.Pct(tS, .99)))
	fmt.Printf("| fresh, interleaved with the soaked one | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(tF, .5)), benchkit.MS(benchkit.Pct(tF, .99)))
	fmt.Printf("\nsoaked / fresh launch latency (p50, each alone): **%.2f** (target <= 1.2); interleaved: %.2f\n\n",
		ratio, float64(benchkit.Pct(tS, .5))/float64(benchkit.Pct(tF, .5)))
}

// soakTenants are the tenants the soak's calls rotate over.
const soakTenants = 8

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// cpuProfile saves a CPU profile of the bermd (started with --pprof) taken over d.
func (d *daemon) cpuProfile(path string, dur time.Duration) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", d.Metrics, int(dur.Seconds())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
	}
}
