// Command launch measures, in one run on one machine: the launch latency of `berm run --
// /bin/true` (through a running bermd) against a bare exec and `bwrap --unshare-all`, and the
// cost of a syscall inside a traced call, outside any sandbox with the agent loaded, and with
// no agent at all. It prints a markdown report. Figures, not assertions.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

func timeRun(name string, args ...string) time.Duration {
	cmd := exec.Command(name, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		benchkit.Must(fmt.Errorf("%s %v: %v: %s", name, args, err, errb.String()))
	}
	return time.Since(start)
}

func main() {
	bin := flag.String("bin", "bin", "directory with berm and bermd")
	n := flag.Int("n", 200, "launches per variant")
	rounds := flag.Int("rounds", 5, "rounds of each syscall measurement")
	soakN := flag.Int("soak", 10000, "calls of the soak (0: none)")
	soakLimit := flag.Duration("soak-time", 8*time.Minute, "time limit of the soak's calls")
	soakOnly := flag.Bool("soak-only", false, "run the soak only")
	soakProfile := flag.String("soak-profile", "", "save CPU profiles of the soaked bermd to FILE.before and FILE.after")
	warmOnly := flag.Bool("warm-only", false, "run the warm launches (interleaved with bare exec and bwrap) and their per-phase breakdown only")
	compare := flag.String("compare", "", "with DIR (another build's bin): compare the warm launches of --bin and DIR in alternating blocks, and nothing else")
	blocks := flag.Int("blocks", 10, "with --compare: blocks per build")
	loadOnly := flag.Bool("load-only", false, "run the launches under load only (back to back, staggered, bursts, saturation)")
	satTime := flag.Duration("saturation", 20*time.Second, "how long each saturation run lasts (0: none)")
	srtCache := flag.String("srt-cache", filepath.Join(os.TempDir(), "berm-bench-srt"), "where the load bench installs srt (npm @anthropic-ai/sandbox-runtime), its second peer (\"\": srt left out)")
	loadFlags := flag.String("load-bermd-flags", "", "with --load-only: more flags for the bermd measured, separated by spaces (\"--warm-max-tenant 64 --warm-max 64\")")
	loadModesFlag := flag.String("load-modes", "", "with --load-only: the modes to run, words of their names separated by commas (\"back to back,16,64,saturation\"; empty: all)")
	flag.Parse()
	berm, bermd := filepath.Join(*bin, "berm"), filepath.Join(*bin, "bermd")
	// settle scrapes bermd's metrics before every launch: uncompressed, so that bermd does
	// not gzip its whole page each time (it showed in bermd's CPU profile).
	http.DefaultTransport.(*http.Transport).DisableCompression = true

	work, err := os.MkdirTemp("/run", "berm-bench.")
	benchkit.Must(err)
	defer os.RemoveAll(work)
	benchkit.OnExit(func() { os.RemoveAll(work) })
	benchkit.Must(os.Chmod(work, 0o755))
	ws := benchkit.Workspace(work, "ws")
	sysloop := filepath.Join(ws, "sysloop")
	benchkit.BuildSysloop(sysloop)
	if *soakOnly {
		soak(bermd, berm, ws, writePolicy(work, "base", 0, 0), *soakN, *n, *soakLimit, *soakProfile)
		return
	}
	const loops = 1_000_000
	const tracedCalls = 200_000

	// Syscall cost with no agent on the machine.
	var bare []float64
	for i := 0; i < *rounds; i++ {
		v, _ := strconv.ParseFloat(benchkit.Output(sysloop, strconv.Itoa(loops)), 64)
		bare = append(bare, v)
	}

	state := filepath.Join(work, "state")
	sock := filepath.Join(work, "bermd.sock")
	if *compare != "" {
		cmpArgs := []string{"--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}
		compareWarm([]*variantRun{{label: *compare, bin: *compare}, {label: *bin, bin: *bin}}, work, ws, writePolicy(work, "base", 0, 0), cmpArgs, *n, *blocks)
		return
	}
	// Cold launches first, from a bermd that keeps no warm sandboxes; then the default bermd.
	dCold := startDaemon(bermd, state, sock, "--warm", "0")
	basePol := writePolicy(work, "base", 0, 0)
	run := func(extra ...string) []string {
		a := []string{"run", "--socket", sock, "--daemon", "required", "--workspace", ws, "--policy", basePol}
		a = append(a, extra...)
		return a
	}

	// Launch latency, interleaved so that noise hits every variant alike. Before each launch
	// bermd has settled (no warm sandbox being started), so that no variant pays for another's
	// background work: the refill that follows a warm launch would otherwise slow the next
	// bare exec and bwrap down, to berm's advantage.
	bwrapArgs := []string{"--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}
	var warmCalls []cliCall // the warm run's berm calls, for the per-phase breakdown
	interleaved := func(d *daemon, prefix string) (tBare, tBwrap, tBerm []time.Duration) {
		for i := 0; i < *n; i++ {
			d.Settle()
			tBare = append(tBare, timeRun("/bin/true"))
			d.Settle()
			tBwrap = append(tBwrap, timeRun("bwrap", bwrapArgs...))
			d.Settle()
			id := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), i)
			start := time.Now()
			tBerm = append(tBerm, timeRun(berm, append(run("--call-id", id, "--"), "/bin/true")...))
			if prefix == "warm" {
				warmCalls = append(warmCalls, cliCall{id, start, start.Add(tBerm[i])})
			}
		}
		return
	}
	if *loadOnly {
		dCold.Stop()
		d := startDaemon(bermd, state, sock, strings.Fields(*loadFlags)...)
		defer d.Stop()
		d.Settle()
		var modes []string
		if *loadModesFlag != "" {
			modes = strings.Split(*loadModesFlag, ",")
		}
		loadBench(d, berm, sock, ws, basePol, max(*n, 100), *satTime, *srtCache, filepath.Join(work, "embedded-load-state"), modes)
		return
	}
	if *warmOnly {
		dCold.Stop()
		d := startDaemon(bermd, state, sock)
		defer d.Stop()
		wBare, wBwrap, wBerm := interleaved(d, "warm")
		fmt.Printf("## Warm launch latency (%d launches each, interleaved)\n\n", *n)
		fmt.Println("| variant | p50 | p90 | p99 | p50 overhead over bare exec | overhead / bwrap's |")
		fmt.Println("|---|---|---|---|---|---|")
		b50 := benchkit.Pct(wBare, .5)
		for _, v := range []struct {
			name string
			t    []time.Duration
		}{{"bare exec /bin/true", wBare}, {"bwrap --unshare-all /bin/true", wBwrap}, {"**berm run, warm sandbox**", wBerm}} {
			fmt.Printf("| %s | %s | %s | %s | %s | %.2f |\n", v.name, benchkit.MS(benchkit.Pct(v.t, .5)), benchkit.MS(benchkit.Pct(v.t, .9)), benchkit.MS(benchkit.Pct(v.t, .99)),
				benchkit.MS(benchkit.Pct(v.t, .5)-b50), float64(benchkit.Pct(v.t, .5)-b50)/float64(benchkit.Pct(wBwrap, .5)-b50))
		}
		fmt.Println()
		rows, err := breakdown(state, warmCalls, d.served)
		benchkit.Must(err)
		printBreakdown(rows, wBerm)
		return
	}
	cBare, cBwrap, cBerm := interleaved(dCold, "cold")
	dCold.Stop()

	d := startDaemon(bermd, state, sock)
	defer d.Stop()
	wBare, wBwrap, wBerm := interleaved(d, "warm")
	// Back to back: each launch right after the last, refills competing with launches.
	var wBack []time.Duration
	for i := 0; i < *n; i++ {
		wBack = append(wBack, timeRun(berm, append(run("--"), "/bin/true")...))
	}
	// The same call from a process that stays (an agent speaking bermd's protocol itself):
	// what the daemon path costs without a berm process per call. Interleaved with its own
	// bare execs, on a settled bermd.
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	benchkit.Must(err)
	var sBare, sSDK []time.Duration
	for i := 0; i < *n; i++ {
		d.Settle()
		sBare = append(sBare, timeRun("/bin/true"))
		d.Settle()
		req := &callproto.Request{
			CallID: fmt.Sprintf("sdk-%d-%d", os.Getpid(), i), Tool: "bench", Tenant: "default",
			Argv: []string{"/bin/true"}, Workspace: ws, Env: []string{"PATH=/usr/bin:/bin"},
			PolicyFile: basePol,
		}
		t0 := time.Now()
		rep, err := callproto.Run(sock, req, [3]*os.File{devNull, devNull, devNull}, nil)
		sSDK = append(sSDK, time.Since(t0))
		if err == nil && rep.Record == nil {
			err = fmt.Errorf("%s", rep.Error)
		}
		benchkit.Must(err)
	}
	warmN, coldN := d.Metric("berm_sandbox_launches_warm_total"), d.Metric("berm_sandbox_launches_cold_total")

	var outside, inside, traced []float64
	for i := 0; i < *rounds; i++ {
		v, _ := strconv.ParseFloat(benchkit.Output(sysloop, strconv.Itoa(loops)), 64)
		outside = append(outside, v)
		v, _ = strconv.ParseFloat(benchkit.Output(berm, append(run("--"), "./sysloop", strconv.Itoa(loops))...), 64)
		inside = append(inside, v)
		v, _ = strconv.ParseFloat(benchkit.Output(berm, append(run("--trace-syscall", "getppid", "--"), "./sysloop", strconv.Itoa(tracedCalls))...), 64)
		traced = append(traced, v)
	}
	var calls []struct {
		Record *struct {
			Events  uint64                        `json:"events"`
			Dropped struct{ Kernel, User uint64 } `json:"dropped"`
			Argv    []string                      `json:"argv"`
		}
	}
	benchkit.Must(json.Unmarshal([]byte(benchkit.Output(berm, "calls", "--state-dir", state, "--json")), &calls))
	var auditedEvents, auditedDropped uint64
	for _, c := range calls {
		if c.Record != nil && len(c.Record.Argv) == 2 && c.Record.Argv[1] == strconv.Itoa(tracedCalls) {
			auditedEvents += c.Record.Events
			auditedDropped += c.Record.Dropped.Kernel + c.Record.Dropped.User
		}
	}

	fmt.Printf("## Launch latency, interleaved (%d launches each; bermd settled before each: the pool refilled)\n\n", *n)
	fmt.Println("`berm run -- /bin/true` through bermd, with the bench policy (Landlock, seccomp, mount layer, no network).")
	fmt.Println("Warm: bermd's default, a sandbox per tenant started ahead of its call; cold: `bermd --warm 0`, every")
	fmt.Println("call's sandbox started for it. Each variant runs interleaved with its own bare and bwrap launches.")
	fmt.Println()
	fmt.Println("| variant | p50 | p99 | p50 overhead over bare exec | overhead / bwrap's |")
	fmt.Println("|---|---|---|---|---|")
	row := func(name string, bare, bw, v []time.Duration) float64 {
		b50 := benchkit.Pct(bare, .5)
		ratio := float64(benchkit.Pct(v, .5)-b50) / float64(benchkit.Pct(bw, .5)-b50)
		fmt.Printf("| %s | %s | %s | %s | %.2f |\n", name, benchkit.MS(benchkit.Pct(v, .5)), benchkit.MS(benchkit.Pct(v, .99)), benchkit.MS(benchkit.Pct(v, .5)-b50), ratio)
		return ratio
	}
	fmt.Printf("| bare exec /bin/true (warm run) | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(wBare, .5)), benchkit.MS(benchkit.Pct(wBare, .99)))
	row("bwrap --unshare-all /bin/true (warm run)", wBare, wBwrap, wBwrap)
	warmRatio := row("**berm run, warm sandbox**", wBare, wBwrap, wBerm)
	fmt.Printf("| bare exec /bin/true (cold run) | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(cBare, .5)), benchkit.MS(benchkit.Pct(cBare, .99)))
	row("bwrap --unshare-all /bin/true (cold run)", cBare, cBwrap, cBwrap)
	coldRatio := row("berm run, cold sandbox", cBare, cBwrap, cBerm)
	fmt.Printf("| berm run, back to back (no wait for the refill; the load tables below time first output) | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(wBack, .5)), benchkit.MS(benchkit.Pct(wBack, .99)))
	fmt.Printf("| bare exec /bin/true (protocol run) | %s | %s | - | - |\n", benchkit.MS(benchkit.Pct(sBare, .5)), benchkit.MS(benchkit.Pct(sBare, .99)))
	fmt.Printf("| the same call through bermd's protocol from a running process, warm | %s | %s | %s | %.2f (against the warm run's bwrap) |\n",
		benchkit.MS(benchkit.Pct(sSDK, .5)), benchkit.MS(benchkit.Pct(sSDK, .99)), benchkit.MS(benchkit.Pct(sSDK, .5)-benchkit.Pct(sBare, .5)),
		float64(benchkit.Pct(sSDK, .5)-benchkit.Pct(sBare, .5))/float64(benchkit.Pct(wBwrap, .5)-benchkit.Pct(wBare, .5)))
	fmt.Printf("\nberm overhead / bwrap overhead (p50): warm **%.2f** (target <= 1.0, moonshot 0.5), cold **%.2f**; bermd launched %.0f calls warm and %.0f cold in the warm runs\n\n",
		warmRatio, coldRatio, warmN, coldN)
	rows, err := breakdown(state, warmCalls, d.served)
	benchkit.Must(err)
	printBreakdown(rows, wBerm)
	loadBench(d, berm, sock, ws, basePol, max(*n, 100), *satTime, *srtCache, filepath.Join(work, "embedded-load-state"), nil)
	onDemand(berm, work, ws, basePol, wBerm)

	fmt.Printf("## Syscall cost (getppid, median of %d rounds)\n\n", *rounds)
	fmt.Println("| where | ns per syscall | over no agent |")
	fmt.Println("|---|---|---|")
	mb := benchkit.Median(bare)
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"no agent loaded", mb},
		{"outside any sandbox, agent loaded", benchkit.Median(outside)},
		{"inside a traced call (counted in the kernel)", benchkit.Median(inside)},
		{"inside a traced call, every syscall an event (fully audited)", benchkit.Median(traced)},
	} {
		fmt.Printf("| %s | %.0f | %+.0f |\n", r.name, r.v, r.v-mb)
	}
	fmt.Printf("\nfully audited per-syscall overhead = **%.2f us** (target <= 1 us); those calls recorded %d events and dropped %d (counted per call)\n",
		(benchkit.Median(traced)-mb)/1000, auditedEvents, auditedDropped)

	// Per-open and per-connect cost with a 100-rule policy against a small one, in one run.
	closed := benchkit.FreePort()
	fsSmall, fs100 := writePolicy(work, "fs-small", 0, 0), writePolicy(work, "fs-100", 100, 0)
	netSmall, net100 := writePolicy(work, "net-1", 0, 1), writePolicy(work, "net-100", 0, 100)
	const opens, connects = 200_000, 20_000
	target := "127.0.0.1:" + strconv.Itoa(closed)
	var oHost, oSmall, o100, cHost, cSmall, c100 []float64
	in := func(pol string, args ...string) float64 {
		a := []string{"run", "--socket", sock, "--daemon", "required", "--workspace", ws, "--policy", pol, "--", "./sysloop"}
		v, _ := strconv.ParseFloat(benchkit.Output(berm, append(a, args...)...), 64)
		return v
	}
	for i := 0; i < *rounds; i++ {
		v, _ := strconv.ParseFloat(benchkit.Output(sysloop, strconv.Itoa(opens), "open", "/etc/hostname"), 64)
		oHost = append(oHost, v)
		oSmall = append(oSmall, in(fsSmall, strconv.Itoa(opens), "open", "/etc/hostname"))
		o100 = append(o100, in(fs100, strconv.Itoa(opens), "open", "/etc/hostname"))
		v, _ = strconv.ParseFloat(benchkit.Output(sysloop, strconv.Itoa(connects), "connect", target), 64)
		cHost = append(cHost, v)
		cSmall = append(cSmall, in(netSmall, strconv.Itoa(connects), "connect", target))
		c100 = append(c100, in(net100, strconv.Itoa(connects), "connect", target))
	}
	fmt.Printf("\n## Per-open and per-connect cost with a 100-rule policy (median of %d rounds)\n\n", *rounds)
	fmt.Println("| operation | outside berm | berm, small policy | berm, 100-rule policy | 100 rules over small |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| open+close /etc/hostname (Landlock: %s) | %.0f ns | %.0f ns | %.0f ns | %+.0f ns |\n", "5 vs 105 path rules",
		benchkit.Median(oHost), benchkit.Median(oSmall), benchkit.Median(o100), benchkit.Median(o100)-benchkit.Median(oSmall))
	fmt.Printf("| TCP connect to a closed loopback port (cgroup hooks: 1 vs 100 egress rules) | %.0f ns | %.0f ns | %.0f ns | %+.0f ns |\n",
		benchkit.Median(cHost), benchkit.Median(cSmall), benchkit.Median(c100), benchkit.Median(c100)-benchkit.Median(cSmall))
	fmt.Println()
	if *soakN > 0 {
		d.Stop()
		soak(bermd, berm, ws, basePol, *soakN, *n, *soakLimit, *soakProfile)
	}
}

// daemon is a bermd run for the benchmark (benchkit's, with metrics on a free port to see it
// settle), its debug log read for the times of each call's phases.
type daemon struct {
	*benchkit.Daemon
	served *served
}

func startDaemon(bermd, state, sock string, extra ...string) *daemon {
	sv := &served{calls: map[string]servedTimes{}}
	d := benchkit.StartDaemonLog(bermd, state, sock, sv.follow, append([]string{"--log-level", "debug"}, extra...)...)
	return &daemon{Daemon: d, served: sv}
}

// writePolicy writes a bench policy: exec from the workspace allowed (the workload lives
// there), extraRead more read grants (distinct /usr/share trees), netRules egress rules (the
// last one allows 127.0.0.1, the others are other networks); netRules > 0 shares the host's
// network through the cgroup hooks.
func writePolicy(dir, name string, extraRead, netRules int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bench-%s}\nspec:\n", name)
	b.WriteString("  filesystem:\n    read: [/bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64, /usr/sbin, /etc")
	if extraRead > 0 {
		ents, err := os.ReadDir("/usr/share")
		benchkit.Must(err)
		n := 0
		for _, e := range ents {
			if e.IsDir() && n < extraRead {
				b.WriteString(", /usr/share/" + e.Name())
				n++
			}
		}
	}
	b.WriteString("]\n    write: [\"${WORKSPACE}\", \"${TMP}\", /dev/null]\n    exec: [\"${WORKSPACE}\", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]\n    deny: []\n")
	if netRules > 0 {
		b.WriteString("  isolation: {network: host-filtered}\n  network:\n    egress:\n")
		for i := 0; i < netRules-1; i++ {
			fmt.Fprintf(&b, "      - {cidr: 10.%d.%d.0/24, ports: [443], protocol: tcp}\n", i/250, i%250)
		}
		b.WriteString("      - {cidr: 127.0.0.1/32, ports: [1-65535], protocol: tcp}\n")
	}
	path := filepath.Join(dir, name+".yaml")
	benchkit.Must(os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}
