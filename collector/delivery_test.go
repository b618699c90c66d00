package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// exactlyOnce checks that ClickHouse holds every event, alert, call and start of the journal
// once: row counts equal distinct identities equal the journal's.
func exactlyOnce(t *testing.T, conn driver.Conn, db, stateDir string) {
	t.Helper()
	var events, alerts, ends, starts uint64
	var seqSum uint64
	_, err := journal.Scan(filepath.Join(stateDir, "journal"), journal.Position{}, func(r journal.Record) error {
		switch r.Type {
		case journal.TypeCallStart:
			starts++
		case journal.TypeCallEnd:
			ends++
		case journal.TypeEvents:
			evs, err := journal.DecodeEvents(r.Payload)
			if err != nil {
				return err
			}
			for _, e := range evs {
				events++
				seqSum += e.Seq
				if e.Kind == event.KindAlert {
					alerts++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    string
		want uint64
	}{
		{"SELECT count() FROM " + db + ".events", events},
		{"SELECT uniqExact(call_id, seq) FROM " + db + ".events", events},
		{"SELECT sum(seq) FROM " + db + ".events", seqSum},
		{"SELECT count() FROM " + db + ".alerts", alerts},
		{"SELECT uniqExact(call_id, seq) FROM " + db + ".alerts", alerts},
		{"SELECT count() FROM " + db + ".calls", ends},
		{"SELECT uniqExact(call_id) FROM " + db + ".calls", ends},
		{"SELECT count() FROM " + db + ".call_starts", starts},
		{"SELECT uniqExact(call_id) FROM " + db + ".call_starts", starts},
	} {
		if got := count(t, conn, c.q); got != c.want {
			t.Errorf("%s = %d, want %d", c.q, got, c.want)
		}
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestClickHouseKilledMidShipping kills the server (SIGKILL) twice while the collector ships,
// restarts it, and finds every row exactly once.
func TestClickHouseKilledMidShipping(t *testing.T) {
	s := chtest.ForTest(t, chtest.Config{})
	state := t.TempDir()
	writeCalls(t, state, "kill", 40, 2500, 100, true)
	c, logs := newCollector(t, state, s.DSN("default"), func(c *Config) { c.BatchRows = 4000 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	for i, after := range []float64{1, 8} {
		waitFor(t, "batches to be shipped", 30*time.Second, func() bool { return testutil.ToFloat64(c.m.batches) >= after })
		s.Kill()
		if testutil.ToFloat64(c.m.backlog) == 0 {
			t.Fatalf("kill %d came after the whole journal was shipped: make the journal bigger", i+1)
		}
		time.Sleep(300 * time.Millisecond)
		if c.m.oldestAge() <= 0 {
			t.Fatal("no oldest unshipped event age while clickhouse is down")
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.Start(rctx); err != nil {
			t.Fatal(err)
		}
		rcancel()
	}
	waitFor(t, "the backlog to be shipped", 60*time.Second, func() bool { return testutil.ToFloat64(c.m.backlog) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if age := c.m.oldestAge(); age != 0 {
		t.Fatalf("oldest unshipped event age %v after everything was shipped", age)
	}
	if testutil.ToFloat64(c.m.retries) == 0 {
		t.Fatal("no retries counted: the kills did not interrupt shipping")
	}
	if !strings.Contains(logs.String(), "shipping to clickhouse failed") {
		t.Fatalf("no failure logged:\n%s", logs)
	}
	t.Logf("retries %v, replayed rows skipped %v", testutil.ToFloat64(c.m.retries), testutil.ToFloat64(c.m.replayed))
	exactlyOnce(t, connect(t, s.DSN("default")), "default", state)
}

// TestReplayAfterAckBeforeCursor is the window the in-flight mark is for: ClickHouse has the
// batch, the collector died before moving its cursor. The replay inserts nothing twice.
func TestReplayAfterAckBeforeCursor(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	state := t.TempDir()
	writeCalls(t, state, "replay", 5, 1000, 100, true)
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	end := c.cur.state.Shipped
	c.Close()
	// Back to the state of a collector killed between the acknowledgement and the cursor save.
	b, _ := json.Marshal(cursorState{InFlight: end})
	if err := os.WriteFile(cursorPath(state, dsn), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Some more records after the in-flight ones: shipped normally.
	writeCalls(t, state, "after", 2, 300, 100, true)
	c2, logs := newCollector(t, state, dsn, nil)
	if err := c2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(c2.m.replayed); got != 5*1000+5*100+5+5 {
		t.Fatalf("replayed rows skipped = %v, want %d\n%s", got, 5*1000+5*100+5+5, logs)
	}
	exactlyOnce(t, connect(t, dsn), c2.db, state)
}

// TestCorruptTail: a torn record at the journal's end is skipped with a warning, what is
// before it is shipped, and records a later writer appends after cutting it are shipped too.
func TestCorruptTail(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	state := t.TempDir()
	writeCalls(t, state, "torn", 3, 200, 50, true)
	seg := filepath.Join(state, "journal", "segment-000000000001.journal")
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A frame header announcing 4 KiB, then only part of it: a writer killed mid-write.
	f.Write([]byte{0x00, 0x10, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x02, '[', '{', '"'})
	f.Close()
	c, logs := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "journal record skipped") || testutil.ToFloat64(c.m.problems) != 1 {
		t.Fatalf("no warning for the torn tail (problems %v):\n%s", testutil.ToFloat64(c.m.problems), logs)
	}
	conn := connect(t, dsn)
	if n := count(t, conn, "SELECT count() FROM "+c.db+".events"); n != 600 {
		t.Fatalf("events = %d, want 600", n)
	}
	writeCalls(t, state, "later", 2, 100, 50, true)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, conn, c.db, state)
	if n := count(t, conn, "SELECT count() FROM "+c.db+".events"); n != 800 {
		t.Fatalf("events = %d, want 800", n)
	}
}

// TestCollectorSIGKILL kills berm-collector with SIGKILL three times while it ships, runs it
// again with --once, and finds every row exactly once.
func TestCollectorSIGKILL(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	bin := buildCollector(t)
	state := t.TempDir()
	writeCalls(t, state, "sigkill", 40, 2500, 100, true)
	conn := connect(t, dsn)
	db := strings.TrimPrefix(dsn[strings.LastIndex(dsn, "/"):], "/")
	total := uint64(40 * 2500)
	for i, atLeast := range []uint64{1, total / 3, 2 * total / 3} {
		cmd := exec.Command(bin, "--state-dir", state, "--clickhouse", dsn, "--batch-rows", "3000")
		out := &logBuf{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A failed wait must not leave the collector running: it would hold what the test
		// holds (the kernel-test lock among them) long after.
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var n uint64
		waitFor(t, fmt.Sprintf("%d events shipped", atLeast), 30*time.Second, func() bool {
			conn.QueryRow(context.Background(), "SELECT count() FROM system.tables WHERE database = '"+db+"' AND name = 'events'").Scan(&n)
			if n == 0 {
				return false
			}
			conn.QueryRow(context.Background(), "SELECT count() FROM "+db+".events").Scan(&n)
			return n >= atLeast
		})
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if n >= total {
			t.Fatalf("kill %d came after the whole journal was shipped:\n%s", i+1, out)
		}
		t.Logf("kill %d at %d events", i+1, n)
	}
	out, err := exec.Command(bin, "--state-dir", state, "--clickhouse", dsn, "--once").CombinedOutput()
	if err != nil {
		t.Fatalf("berm-collector --once: %v\n%s", err, out)
	}
	exactlyOnce(t, conn, db, state)
}

func buildCollector(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "berm-collector")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/bermsec/berm/cmd/berm-collector").CombinedOutput()
	if err != nil {
		t.Fatalf("build berm-collector: %v\n%s", err, out)
	}
	return bin
}
