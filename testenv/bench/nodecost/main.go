// Command nodecost measures what berm costs the node's other processes (issue 29, item 5): a
// host process's getppid loop, outside every call, with no agent, with bermd loaded and idle
// (no call: its syscall programs detached), and with bermd running calls (its syscall programs
// attached, the host's syscalls leaving at their early-out). The three are measured in each of
// --rounds rounds, one after another in the same run, and the ratios are of medians over the
// rounds. The loop's cost is its thread's CPU time per syscall, not wall time, so a machine
// loaded by others inflates it less. It prints a markdown report. Figures, not assertions.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

func threadCPU() time.Duration {
	var ts unix.Timespec
	benchkit.Must(unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts))
	return time.Duration(ts.Nano())
}

// loop is the host's syscall loop: n getppid, ns of CPU per call; the best of reps runs (the
// least disturbed by the machine's other work).
func loop(n, reps int) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := 0.0
	for r := 0; r < reps; r++ {
		start := threadCPU()
		for i := 0; i < n; i++ {
			syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
		}
		ns := float64(threadCPU()-start) / float64(n)
		if r == 0 || ns < best {
			best = ns
		}
	}
	return best
}

// rawSyscallLinks counts the programs attached to the raw syscall tracepoints now, whoever's.
func rawSyscallLinks() int {
	n := 0
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		if rt := info.RawTracepoint(); rt != nil && (rt.Name == "sys_enter" || rt.Name == "sys_exit") {
			n++
		}
	}
	return n
}

func main() {
	bin := flag.String("bin", "bin", "directory with berm and bermd")
	rounds := flag.Int("rounds", 5, "rounds of the three cases")
	n := flag.Int("n", 300000, "getppid calls per measurement")
	reps := flag.Int("reps", 3, "measurements per case and round (the best is kept)")
	calls := flag.Int("calls", 4, "calls running (each a sleep) in the third case")
	flag.Parse()
	berm, bermd := filepath.Join(*bin, "berm"), filepath.Join(*bin, "bermd")

	work, err := os.MkdirTemp("", "berm-bench-nodecost.")
	benchkit.Must(err)
	defer os.RemoveAll(work)
	benchkit.OnExit(func() { os.RemoveAll(work) })
	benchkit.Must(os.Chmod(work, 0o755))
	ws := benchkit.Workspace(work, "ws")

	var none, idle, busy []float64
	var attachedIdle, attachedBusy []int
	clean := make([]bool, *rounds) // no other agent's syscall programs attached around the round
	for r := 0; r < *rounds; r++ {
		before := rawSyscallLinks()
		none = append(none, loop(*n, *reps))
		if rawSyscallLinks() != before {
			before = -1
		}

		state := filepath.Join(work, fmt.Sprintf("state%d", r))
		sock := filepath.Join(work, fmt.Sprintf("bermd%d.sock", r))
		d := benchkit.StartDaemon(bermd, state, sock)
		d.Settle()
		// Past the linger after its last call (none here): idle, as a node between calls is.
		time.Sleep(3 * time.Second)
		attachedIdle = append(attachedIdle, rawSyscallLinks()-max(before, 0))
		idle = append(idle, loop(*n, *reps))

		var running []*exec.Cmd
		for i := 0; i < *calls; i++ {
			c := exec.Command(berm, "run", "--socket", sock, "--daemon", "required", "--workspace", ws,
				"--call-id", fmt.Sprintf("nodecost-%d-%d-%d", os.Getpid(), r, i), "--", "/bin/sleep", "600")
			benchkit.Must(c.Start())
			running = append(running, c)
		}
		for i := 0; d.Metric("berm_calls_active") < float64(*calls); i++ {
			if i > 3000 {
				benchkit.Must(fmt.Errorf("bermd has %v calls active, want %d", d.Metric("berm_calls_active"), *calls))
			}
			time.Sleep(10 * time.Millisecond)
		}
		attachedBusy = append(attachedBusy, rawSyscallLinks()-max(before, 0))
		busy = append(busy, loop(*n, *reps))
		for _, c := range running {
			c.Process.Signal(os.Interrupt)
		}
		for _, c := range running {
			c.Wait()
		}
		d.Stop()
		clean[r] = before == 0 && rawSyscallLinks() == 0
	}

	// The medians are over the clean rounds: another agent's programs (another engineer's bermd
	// on a shared machine) make every case of its rounds pay for them.
	pick := func(v []float64) []float64 {
		var out []float64
		for r, x := range v {
			if clean[r] {
				out = append(out, x)
			}
		}
		if len(out) == 0 {
			return append([]float64(nil), v...)
		}
		return out
	}
	noneM, idleM, busyM := benchkit.Median(pick(none)), benchkit.Median(pick(idle)), benchkit.Median(pick(busy))
	nclean := len(pick(none))
	fmt.Println("## What the node pays: a host process's syscalls outside every call")
	fmt.Println()
	fmt.Printf("A getppid loop on the host (not in any call), CPU time per syscall, the best of %d runs of %d in each case, median over the rounds with no other agent's syscall programs attached (%d of %d); the three cases one after another in each round.\n\n", *reps, *n, nclean, *rounds)
	fmt.Println("| case | ns per syscall (median) | rounds | / no agent | raw syscall programs attached |")
	fmt.Println("|---|---|---|---|---|")
	row := func(name string, m float64, v []float64, attached string) {
		fmt.Printf("| %s | %.0f | %s | %.2f | %s |\n", name, m, list(v), m/noneM, attached)
	}
	row("no agent", noneM, none, "0")
	row("bermd loaded, no call (idle)", idleM, idle, ints(attachedIdle))
	row(fmt.Sprintf("bermd with %d calls running", *calls), busyM, busy, ints(attachedBusy))
	var dirty []int
	for r, ok := range clean {
		if !ok {
			dirty = append(dirty, r+1)
		}
	}
	if len(dirty) > 0 {
		fmt.Printf("\nRounds %v had another agent's programs on the raw syscall tracepoints (a bermd outside this bench): every case of theirs paid for them, and they are left out of the medians", dirty)
		if nclean == 0 {
			fmt.Print(" (none was clean: the medians are over all rounds)")
		}
		fmt.Println(".")
	}
}

func list(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}

func ints(v []int) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(x)
	}
	return s
}
