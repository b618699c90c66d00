package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// The launch as users load it: calls back to back (each as soon as the last one ended),
// staggered (one every few milliseconds, overlapping), in bursts of 16 and 64 at once, and at
// saturation (callers each calling again as soon as theirs ended, several tenants): each
// against bwrap and a bare exec in the same run, with no wait for bermd to settle anywhere.
// What is timed is what an agent waits for: from the start of the launcher to the tool's
// first output (`echo x`).

// firstOutput starts cmd and returns the time to the first byte on its stdout, then waits
// for it to end. A call that fails is an error (with its stderr), never a time.
func firstOutput(cmd *exec.Cmd) (time.Duration, error) {
	out, err := cmd.StdoutPipe()
	benchkit.Must(err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	benchkit.Must(cmd.Start())
	r := bufio.NewReader(out)
	_, rerr := r.ReadByte()
	d := time.Since(start)
	_, _ = r.WriteTo(noWriter{})
	if err := cmd.Wait(); err != nil || rerr != nil {
		return 0, fmt.Errorf("%v: %v (first output: %v): %s", cmd.Args[len(cmd.Args)-2:], err, rerr, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

// failures counts the calls of a run that failed, and keeps the first few reasons.
type failures struct {
	mu      sync.Mutex
	n       int
	reasons []string
}

func (f *failures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.reasons) < 3 {
		f.reasons = append(f.reasons, err.Error())
	}
}

func (f *failures) String() string {
	if f.n == 0 {
		return "0"
	}
	return fmt.Sprintf("**%d** (%s)", f.n, strings.Join(f.reasons, "; "))
}

type noWriter struct{}

func (noWriter) Write(b []byte) (int, error) { return len(b), nil }

// launcher makes the command of one call of a variant, for tenant i's tool argv.
type launcher struct {
	name string
	cmd  func(tenant int, argv ...string) *exec.Cmd
}

func loadVariants(berm, sock, ws, pol string) []launcher {
	return []launcher{
		{"bare exec", func(_ int, argv ...string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }},
		{"bwrap --unshare-all", func(_ int, argv ...string) *exec.Cmd {
			return exec.Command("bwrap", append([]string{"--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}, argv...)...)
		}},
		{"berm run (bermd)", func(tenant int, argv ...string) *exec.Cmd {
			a := []string{"run", "--socket", sock, "--daemon", "required", "--workspace", ws, "--policy", pol, "--tenant", fmt.Sprintf("t%d", tenant), "--"}
			return exec.Command(berm, append(a, argv...)...)
		}},
	}
}

// srtVersion is the sandbox-runtime the load bench measures as a second peer.
const srtVersion = "0.0.83"

// srtLauncher is Anthropic's sandbox-runtime (`srt`, npm @anthropic-ai/sandbox-runtime) with
// its default settings, installed into cache on first use; why it is not, if it cannot run
// here (it needs node, npm, bwrap, socat and ripgrep).
func srtLauncher(cache string) (launcher, string) {
	bin := filepath.Join(cache, "node_modules", ".bin", "srt")
	if _, err := os.Stat(bin); err != nil {
		if out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", cache, "@anthropic-ai/sandbox-runtime@"+srtVersion).CombinedOutput(); err != nil {
			return launcher{}, fmt.Sprintf("npm install @anthropic-ai/sandbox-runtime@%s: %v: %s", srtVersion, err, lastLine(out))
		}
	}
	home := filepath.Join(cache, "home") // its settings file is looked up in $HOME: none, the defaults
	if err := os.MkdirAll(home, 0o700); err != nil {
		return launcher{}, err.Error()
	}
	l := launcher{"srt", func(_ int, argv ...string) *exec.Cmd {
		c := exec.Command(bin, argv...)
		c.Env = append(os.Environ(), "HOME="+home)
		return c
	}}
	if out, err := l.cmd(0, "echo", "x").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "x" {
		return launcher{}, fmt.Sprintf("srt echo x: %v: %s", err, lastLine(out))
	}
	return l, ""
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

type loadMode struct {
	name string
	run  func(l launcher, f *failures) []time.Duration
}

// timed runs one call and keeps its time, or counts its failure.
func timed(cmd *exec.Cmd, f *failures, mu *sync.Mutex, out *[]time.Duration) {
	d, err := firstOutput(cmd)
	if err != nil {
		f.add(err)
		return
	}
	mu.Lock()
	*out = append(*out, d)
	mu.Unlock()
}

func loadModes(n int) []loadMode {
	echo := []string{"echo", "x"}
	burst := func(size, rounds int) func(l launcher, f *failures) []time.Duration {
		return func(l launcher, f *failures) []time.Duration {
			var (
				mu  sync.Mutex
				out []time.Duration
			)
			for range rounds {
				var wg sync.WaitGroup
				for range size {
					wg.Add(1)
					go func() {
						defer wg.Done()
						timed(l.cmd(0, echo...), f, &mu, &out)
					}()
				}
				wg.Wait()
			}
			return out
		}
	}
	return []loadMode{
		{fmt.Sprintf("back to back (%d calls, each right after the last)", n), func(l launcher, f *failures) []time.Duration {
			var (
				mu  sync.Mutex
				out []time.Duration
			)
			for range n {
				timed(l.cmd(0, echo...), f, &mu, &out)
			}
			return out
		}},
		{fmt.Sprintf("staggered (%d calls, one every 20 ms)", n), func(l launcher, f *failures) []time.Duration {
			var (
				mu  sync.Mutex
				out []time.Duration
				wg  sync.WaitGroup
			)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					timed(l.cmd(0, echo...), f, &mu, &out)
				}()
				time.Sleep(20 * time.Millisecond)
			}
			wg.Wait()
			return out
		}},
		{"bursts of 16 at once (8 bursts)", burst(16, 8)},
		{"bursts of 64 at once (2 bursts)", burst(64, 2)},
	}
}

// saturation runs callers concurrent loops of mixed small tools across tenants for d and
// returns the calls per second and their latencies.
func saturation(l launcher, callers, tenants int, d time.Duration, f *failures) (float64, []time.Duration) {
	tools := [][]string{{"echo", "x"}, {"sh", "-c", "echo x"}, {"ls", "."}, {"cat", "/etc/hostname"}}
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				timed(l.cmd(c%tenants, tools[(c+i)%len(tools)]...), f, &mu, &lat)
			}
		}()
	}
	wg.Wait()
	return float64(len(lat)) / d.Seconds(), lat
}

// loadBench prints the load tables, bermd being d (default pool bounds); srt, Anthropic's
// sandbox-runtime, is a second peer where it runs (installed into srtCache).
// modes, when not empty, picks the modes whose names contain one of its words (and the
// saturation run when it names "saturation"); srtCache "" leaves srt out.
func loadBench(d *daemon, berm, sock, ws, pol string, n int, satTime time.Duration, srtCache, state string, modes []string) {
	vs := loadVariants(berm, sock, ws, pol)
	picked := func(name string) bool {
		if len(modes) == 0 {
			return true
		}
		for _, m := range modes {
			if strings.Contains(name, m) {
				return true
			}
		}
		return false
	}
	srt, whyNot := launcher{}, "left out (--srt-cache \"\")"
	if srtCache != "" {
		srt, whyNot = srtLauncher(srtCache)
	}
	var phaseNames []string
	var phaseObs []launchPhases
	fmt.Printf("## Launch under load: time to first output of `echo x`\n\n")
	fmt.Println("No pause for bermd to settle: refills compete with the launches, as they do for an agent's calls.")
	fmt.Println("Overhead is each mode's percentile minus the bare exec's same percentile in the same mode; the ratio is berm's overhead over bwrap's (and over srt's).")
	if whyNot != "" {
		fmt.Printf("srt (sandbox-runtime %s) is not measured: %s.\n", srtVersion, whyNot)
	} else {
		fmt.Printf("srt: sandbox-runtime %s with its default settings.\n", srtVersion)
	}
	fmt.Println()
	fmt.Println("| mode | bare p50 / p95 / p99 | bwrap p50 / p95 / p99 | srt p50 / p95 / p99 | berm p50 / p95 / p99 | berm / bwrap overhead p50 | p99 | berm / srt overhead p50 | berm launches warm | failed calls (bwrap, srt, berm) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	pcts := func(t []time.Duration) string {
		if len(t) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s / %s / %s", benchkit.MS(benchkit.Pct(t, .5)), benchkit.MS(benchkit.Pct(t, .95)), benchkit.MS(benchkit.Pct(t, .99)))
	}
	// res: bare, bwrap, berm, srt
	row := func(name string, res [4][]time.Duration, fails *[4]failures, warm string) {
		ratio := func(peer int, p float64) string {
			if len(res[peer]) == 0 || len(res[2]) == 0 || len(res[0]) == 0 {
				return "-"
			}
			b := benchkit.Pct(res[0], p)
			return fmt.Sprintf("%.2f", float64(benchkit.Pct(res[2], p)-b)/float64(benchkit.Pct(res[peer], p)-b))
		}
		srtFails := "-"
		if srt.cmd != nil {
			srtFails = fails[3].String()
		}
		fmt.Printf("| %s | %s | %s | %s | %s | **%s** | %s | %s | %s | %s, %s, %s |\n", name, pcts(res[0]), pcts(res[1]), pcts(res[3]), pcts(res[2]),
			ratio(1, .5), ratio(1, .99), ratio(3, .5), warm, &fails[1], srtFails, &fails[2])
	}
	for _, m := range loadModes(n) {
		if !picked(m.name) {
			continue
		}
		var res [4][]time.Duration
		var fails [4]failures
		for i, v := range vs[:2] {
			res[i] = m.run(v, &fails[i])
		}
		if srt.cmd != nil {
			res[3] = m.run(srt, &fails[3])
		}
		d.Settle()
		w0, c0 := d.Metric("berm_sandbox_launches_warm_total"), d.Metric("berm_sandbox_launches_cold_total")
		ph0 := scrapeLaunchPhases(d)
		res[2] = m.run(vs[2], &fails[2])
		w, c := d.Metric("berm_sandbox_launches_warm_total")-w0, d.Metric("berm_sandbox_launches_cold_total")-c0
		phaseNames, phaseObs = append(phaseNames, strings.SplitN(m.name, " (", 2)[0]), append(phaseObs, scrapeLaunchPhases(d).minus(ph0))
		row(m.name, res, &fails, fmt.Sprintf("%.0f of %.0f", w, w+c))
	}
	// The embedded first call: `berm run --daemon never` loads the eBPF programs itself for each
	// call, with no bermd; against the peers' back-to-back calls of the same run.
	if picked("embedded") {
		const k = 10
		embedded := launcher{"berm run --daemon never", func(_ int, argv ...string) *exec.Cmd {
			a := []string{"run", "--daemon", "never", "--state-dir", state, "--workspace", ws, "--policy", pol, "--"}
			return exec.Command(berm, append(a, argv...)...)
		}}
		backToBack := func(l launcher, f *failures) []time.Duration {
			var (
				mu  sync.Mutex
				out []time.Duration
			)
			for range k {
				timed(l.cmd(0, "echo", "x"), f, &mu, &out)
			}
			return out
		}
		var res [4][]time.Duration
		var fails [4]failures
		res[0], res[1] = backToBack(vs[0], &fails[0]), backToBack(vs[1], &fails[1])
		if srt.cmd != nil {
			res[3] = backToBack(srt, &fails[3])
		}
		res[2] = backToBack(embedded, &fails[2])
		row(fmt.Sprintf("embedded first call (`berm run --daemon never`, %d calls one after another, no bermd used)", k), res, &fails, "-")
	}
	fmt.Println()
	if satTime <= 0 || !picked("saturation") {
		printLaunchPhases(phaseNames, phaseObs)
		return
	}
	fmt.Printf("## Saturation: calls per second (%s each; mixed small tools: echo, sh -c, ls of the workspace, cat; berm's across 8 tenants)\n\n", satTime)
	fmt.Println("| callers | bwrap calls/s, p50 | srt calls/s, p50 | berm calls/s, p50 | berm / bwrap throughput | berm / srt throughput | berm launches warm | failed calls (bwrap, srt, berm) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, callers := range []int{32, 64} {
		var fb, fs, fe failures
		bw, bwl := saturation(vs[1], callers, 8, satTime, &fb)
		st, sts, srtRatio, srtFails := "-", 0.0, "-", "-"
		if srt.cmd != nil {
			var stl []time.Duration
			sts, stl = saturation(srt, callers, 8, satTime, &fs)
			if len(stl) > 0 {
				st = fmt.Sprintf("%.1f, %s", sts, benchkit.MS(benchkit.Pct(stl, .5)))
			}
			srtFails = fs.String()
		}
		d.Settle()
		w0, c0 := d.Metric("berm_sandbox_launches_warm_total"), d.Metric("berm_sandbox_launches_cold_total")
		ph0 := scrapeLaunchPhases(d)
		be, bel := saturation(vs[2], callers, 8, satTime, &fe)
		w, c := d.Metric("berm_sandbox_launches_warm_total")-w0, d.Metric("berm_sandbox_launches_cold_total")-c0
		phaseNames, phaseObs = append(phaseNames, fmt.Sprintf("saturation, %d callers", callers)), append(phaseObs, scrapeLaunchPhases(d).minus(ph0))
		if sts > 0 {
			srtRatio = fmt.Sprintf("%.2f", be/sts)
		}
		fmt.Printf("| %d | %.1f, %s | %s | %.1f, %s | **%.2f** | %s | %.0f of %.0f | %s, %s, %s |\n", callers, bw, benchkit.MS(benchkit.Pct(bwl, .5)), st, be, benchkit.MS(benchkit.Pct(bel, .5)), be/bw, srtRatio, w, w+c, &fb, srtFails, &fe)
	}
	fmt.Println()
	printLaunchPhases(phaseNames, phaseObs)
}
