package collector

import (
	"context"
	"testing"
)

// TestShipAndReadBack ships a journal and reads it back: the same calls and timelines as from
// the journal, every event once, alerts in their table, the cursor at the journal's end.
func TestShipAndReadBack(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	state := t.TempDir()
	writeCalls(t, state, "rb", 6, 500, 50, true)
	writeCalls(t, state, "running", 2, 40, 40, false)
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	db := c.db
	if n := count(t, conn, "SELECT count() FROM "+db+".events"); n != 6*500+2*40 {
		t.Fatalf("events: %d rows, want %d", n, 6*500+2*40)
	}
	if n := count(t, conn, "SELECT uniqExact(call_id, seq) FROM "+db+".events"); n != 6*500+2*40 {
		t.Fatalf("distinct events: %d", n)
	}
	// Approval events (seq 29, 129, ...: 5 of each finished call's 500, 1 of each running
	// call's 40) land in their own columns.
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE kind = 'approval' AND approval_outcome = 'approved' AND approval_id = 'a1b2c3d4e5f6' AND approval_action = 'unlink' AND approval_by = 'alice' AND approval_channel = 'api' AND approval_latency_ns = 1500000000 AND path = '/ws/reports/a' AND rule = 'delete-reports' AND syscall = 'unlinkat'"); n != 6*5+2*1 {
		t.Fatalf("approval rows: %d, want %d", n, 6*5+2*1)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".alerts"); n != (6*500+2*40)/10 {
		t.Fatalf("alerts: %d rows, want %d", n, (6*500+2*40)/10)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls"); n != 6 {
		t.Fatalf("calls: %d rows, want 6", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".call_starts"); n != 8 {
		t.Fatalf("call_starts: %d rows, want 8", n)
	}
	// The columns of the newer members: phase, and the record's completeness.
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE phase = 'setup'"); n != 6*10+2 {
		t.Fatalf("events of the setup phase: %d rows, want %d", n, 6*10+2)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls WHERE complete = 1 AND incomplete_reason = ''"); n != 4 {
		t.Fatalf("complete calls: %d rows, want 4", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls WHERE complete = 0 AND incomplete_reason = '3 events lost in the kernel'"); n != 2 {
		t.Fatalf("incomplete calls: %d rows, want 2", n)
	}
	sameAsJournal(t, state, dsn, 8)
	// Running again ships nothing twice.
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".events"); n != 6*500+2*40 {
		t.Fatalf("events after a second run: %d rows", n)
	}
}
