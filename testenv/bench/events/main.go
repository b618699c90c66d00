// Command events measures berm's export formats (issue 28): events per second and bytes per
// event of `berm events` as JSON lines and as Tetragon's GetEventsResponse, read once and
// followed, against the peer in the same run, reading the journal raw (scan and decode, no
// output). The journal is a synthetic one of a tool call's usual mix (execs with their argv,
// opens, connects, denials). It prints a markdown report. Figures, not assertions.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

func main() {
	bin := flag.String("bin", "bin", "directory with berm")
	n := flag.Int("events", 300_000, "events in the journal read once")
	follow := flag.Int("follow", 100_000, "events appended while berm events --follow reads them")
	flag.Parse()
	if err := run(*bin, *n, *follow); err != nil {
		fmt.Fprintln(os.Stderr, "events bench:", err)
		os.Exit(1)
	}
}

// events is the k-th batch of 256 events of the call c: a tool's usual mix.
func events(c, k int, t0 time.Time) []event.Event {
	out := make([]event.Event, 0, 256)
	id := fmt.Sprintf("bench-events-%d", c)
	for i := 0; i < 256; i++ {
		e := event.Event{CallID: id, CallKey: "k-" + id, Seq: uint64(k*256 + i + 1), Time: t0.Add(time.Duration(k*256+i) * time.Microsecond),
			Tool: "shell", Tenant: "bench", PID: uint32(1000 + i%7), TID: uint32(1000 + i%7), PPID: 999, UID: 65534, Comm: "python3", Exe: "/usr/bin/python3.11", ParentExe: "/bin/sh"}
		switch i % 8 {
		case 0:
			e.Kind, e.Exec = event.KindExec, &event.Exec{Filename: "/usr/bin/git", Argv: []string{"git", "status", "--porcelain", "-uall"}, Mode: 0o100755, ExePath: "/usr/bin/git"}
		case 1, 2, 3, 4:
			e.Kind, e.Open = event.KindOpen, &event.Open{Path: fmt.Sprintf("/work/ws/src/pkg%d/file_%d.go", i%13, i), Dirfd: -100, Result: 3}
		case 5, 6:
			e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "inet", Addr: "140.82.112.3", Port: 443}
		case 7:
			e.Kind, e.Denial = event.KindDenial, &event.Denial{Layer: event.LayerLandlock, Surface: event.SurfaceIsolation, Rule: "fs", Object: "/etc/shadow"}
		}
		out = append(out, e)
	}
	return out
}

func write(w *journal.Writer, calls, batches int, t0 time.Time) error {
	for c := 0; c < calls; c++ {
		s := &event.CallStart{CallID: fmt.Sprintf("bench-events-%d", c), CallKey: fmt.Sprintf("k-bench-events-%d", c), Tool: "shell", Tenant: "bench", Node: "bench", Start: t0}
		if err := w.AppendCallStart(s); err != nil {
			return err
		}
		for k := 0; k < batches; k++ {
			if err := w.AppendEvents(events(c, k, t0)); err != nil {
				return err
			}
		}
	}
	return nil
}

// counter counts the lines and bytes written to it.
type counter struct{ lines, bytes int }

func (c *counter) Write(p []byte) (int, error) {
	c.bytes += len(p)
	for _, b := range p {
		if b == '\n' {
			c.lines++
		}
	}
	return len(p), nil
}

func run(bin string, n, followN int) error {
	berm, err := filepath.Abs(filepath.Join(bin, "berm"))
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "berm-bench-events-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	dir := filepath.Join(state, "journal")
	w, err := journal.OpenWriter(dir)
	if err != nil {
		return err
	}
	defer w.Close()
	t0 := time.Now().Add(-time.Hour)
	batches := n / 256 / 10
	if err := write(w, 10, batches, t0); err != nil {
		return err
	}
	total := 10 * batches * 256

	fmt.Println("## berm events: the export formats (issue 28)")
	fmt.Println()
	fmt.Printf("%d events of 10 synthetic calls (execs, opens, connects, denials), read once (median of 3); then %d appended while `--follow` reads.\n\n", total, followN)
	fmt.Println("| reader | events/s | bytes/event | against the raw read |")
	fmt.Println("|---|---|---|---|")

	// the peer: the journal read raw, what every reader of the journal pays first
	var payload int
	raw := median(func() (time.Duration, error) {
		payload = 0
		start := time.Now()
		got := 0
		_, err := journal.Scan(dir, journal.Position{}, func(r journal.Record) error {
			if r.Type != journal.TypeEvents {
				return nil
			}
			payload += len(r.Payload)
			evs, err := journal.DecodeEvents(r.Payload)
			got += len(evs)
			return err
		})
		if err == nil && got != total {
			err = fmt.Errorf("raw read: %d events, want %d", got, total)
		}
		return time.Since(start), err
	})
	if raw.err != nil {
		return raw.err
	}
	rawRate := float64(total) / raw.d.Seconds()
	fmt.Printf("| journal read raw (scan + decode, no output) | %.0f | %.0f (the journal's record) | 1.00 |\n", rawRate, float64(payload)/float64(total))

	for _, format := range []string{"json", "tetragon"} {
		var out counter
		m := median(func() (time.Duration, error) {
			out = counter{}
			cmd := exec.Command(berm, "events", "--state-dir", state, "--all", "--format", format)
			cmd.Stdout = &out
			cmd.Stderr = io.Discard
			start := time.Now()
			err := cmd.Run()
			return time.Since(start), err
		})
		if m.err != nil {
			return fmt.Errorf("berm events --format %s: %w", format, m.err)
		}
		if out.lines == 0 {
			return fmt.Errorf("berm events --format %s wrote nothing", format)
		}
		rate := float64(out.lines) / m.d.Seconds()
		fmt.Printf("| `berm events --format %s` (the process, to a pipe) | %.0f | %.0f | %.2f |\n", format, rate, float64(out.bytes)/float64(out.lines), rate/rawRate)
	}

	// following: what `berm events --follow` sustains while the journal grows as fast as one
	// writer appends
	fstate, err := os.MkdirTemp("", "berm-bench-follow-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(fstate)
	fw, err := journal.OpenWriter(filepath.Join(fstate, "journal"))
	if err != nil {
		return err
	}
	defer fw.Close()
	cmd := exec.Command(berm, "events", "--state-dir", fstate, "--all", "--follow")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond) // the follower has read its empty journal and polls
	start := time.Now()
	lines := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(nil, 1<<20)
		k := 0
		for sc.Scan() {
			if k++; k == followN {
				break
			}
		}
		lines <- k
	}()
	now := time.Now()
	appendStart := time.Now()
	for c := 0; c*256*10 < followN; c++ {
		s := &event.CallStart{CallID: fmt.Sprintf("bench-follow-%d", c), CallKey: fmt.Sprintf("k-bench-follow-%d", c), Tool: "shell", Tenant: "bench", Start: now}
		if err := fw.AppendCallStart(s); err != nil {
			return err
		}
		for k := 0; k < 10 && (c*10+k)*256 < followN; k++ {
			evs := events(c, k, now)
			for i := range evs {
				evs[i].CallID, evs[i].CallKey = s.CallID, s.CallKey
			}
			if err := fw.AppendEvents(evs); err != nil {
				return err
			}
		}
	}
	appended := time.Since(appendStart)
	select {
	case k := <-lines:
		d := time.Since(start)
		fmt.Printf("| `berm events --follow` (JSON, appended while it follows) | %.0f | | %.2f |\n", float64(k)/d.Seconds(), float64(k)/d.Seconds()/rawRate)
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("berm events --follow did not read %d events in 5 minutes", followN)
	}
	fmt.Println()
	fmt.Printf("The writer appended them at %.0f events/s; the follower reads the journal every 200 ms and writes each line as it comes (a write per event): its figure includes a poll's wait.\n", float64(followN)/appended.Seconds())
	return nil
}

type result struct {
	d   time.Duration
	err error
}

// median runs f three times and gives the middle duration.
func median(f func() (time.Duration, error)) result {
	var ds []time.Duration
	for i := 0; i < 3; i++ {
		d, err := f()
		if err != nil {
			return result{err: err}
		}
		ds = append(ds, d)
	}
	for i := range ds {
		for j := i + 1; j < len(ds); j++ {
			if ds[j] < ds[i] {
				ds[i], ds[j] = ds[j], ds[i]
			}
		}
	}
	return result{d: ds[1]}
}
