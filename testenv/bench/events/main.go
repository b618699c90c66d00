// Command events measures berm's export formats (issue 28): events per second and bytes per
// event of `berm events` as JSON lines and as Tetragon's GetEventsResponse, read once and
// followed, against the peer in the same run, reading the journal raw (scan and decode, no
// output). The journal is a synthetic one of a tool call's usual mix (execs with their argv,
// opens, connects, denials). With -clickhouse (the default) it also ships the journal with the
// collector into a clickhouse-server of its own (testenv/clickhouse) and gives the bytes per
// event the events table stores, compressed and not (system.parts). It prints a markdown
// report. Figures, not assertions.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/collector"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

func main() {
	bin := flag.String("bin", "bin", "directory with berm")
	n := flag.Int("events", 300_000, "events in the journal read once")
	follow := flag.Int("follow", 100_000, "events appended while berm events --follow reads them")
	stored := flag.Bool("clickhouse", true, "also ship the journal into a real ClickHouse (testenv/clickhouse) and give the bytes per event it stores")
	flag.Parse()
	if err := run(*bin, *n, *follow, *stored); err != nil {
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

func run(bin string, n, followN int, stored bool) error {
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
	var note string
	if stored {
		if note, err = clickhouseBytes(state, total, rawRate); err != nil {
			return fmt.Errorf("clickhouse: %w", err)
		}
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
	if note != "" {
		fmt.Println()
		fmt.Println(note)
	}
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

// clickhouseBytes ships the journal in state with the collector into a real ClickHouse of its
// own, merges the events table's parts and prints the bytes per event the table stores,
// compressed on disk and uncompressed (system.parts; the columns' share from system.columns).
func clickhouseBytes(state string, total int, rawRate float64) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "berm-bench-events-ch-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	ch, err := chtest.Start(ctx, chtest.Config{Dir: dir})
	if err != nil {
		return "", err
	}
	defer ch.Stop()
	dsn := ch.DSN("berm")
	log := slog.New(slog.DiscardHandler)
	if err := collector.MigrateDSN(ctx, dsn, "", 0, log); err != nil {
		return "", err
	}
	c, err := collector.New(collector.Config{StateDir: state, DSN: dsn, Logger: log})
	if err != nil {
		return "", err
	}
	defer c.Close()
	start := time.Now()
	if err := c.RunOnce(ctx); err != nil {
		return "", fmt.Errorf("ship: %w", err)
	}
	shipped := time.Since(start)
	q := func(sql string) (string, error) {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/", ch.HTTPPort), "text/plain", strings.NewReader(sql))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", sql, strings.TrimSpace(string(b)))
		}
		return strings.TrimSpace(string(b)), nil
	}
	// one part: what the table holds once ClickHouse has merged it
	if _, err := q("OPTIMIZE TABLE berm.events FINAL"); err != nil {
		return "", err
	}
	row, err := q("SELECT sum(rows), sum(data_compressed_bytes), sum(data_uncompressed_bytes), count() FROM system.parts WHERE database = 'berm' AND table = 'events' AND active FORMAT TabSeparated")
	if err != nil {
		return "", err
	}
	f := strings.Split(row, "\t")
	if len(f) != 4 {
		return "", fmt.Errorf("system.parts: %q", row)
	}
	var v [4]float64
	for i := range f {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return "", fmt.Errorf("system.parts: %q: %w", row, err)
		}
	}
	if int(v[0]) != total {
		return "", fmt.Errorf("the events table holds %.0f rows, the journal %d events", v[0], total)
	}
	cols, err := q("SELECT sum(data_compressed_bytes), sum(data_uncompressed_bytes) FROM system.columns WHERE database = 'berm' AND table = 'events' FORMAT TabSeparated")
	if err != nil {
		return "", err
	}
	fmt.Printf("| the collector into ClickHouse (%s, events table: %.0f active parts after OPTIMIZE FINAL; shipped once) | %.0f | %.0f stored compressed (%.0f uncompressed) | %.2f |\n",
		serverVersion(q), v[3], float64(total)/shipped.Seconds(), v[1]/v[0], v[2]/v[0], float64(total)/shipped.Seconds()/rawRate)
	c2 := strings.Split(cols, "\t")
	return fmt.Sprintf("ClickHouse: the events table's columns (system.columns) hold %s bytes compressed, %s uncompressed, for %d events; the collector's events/s is one RunOnce of the whole journal (decode, batches of 50000, inserts).", c2[0], c2[len(c2)-1], total), nil
}

func serverVersion(q func(string) (string, error)) string {
	v, err := q("SELECT version()")
	if err != nil {
		return "?"
	}
	return "ClickHouse " + v
}
