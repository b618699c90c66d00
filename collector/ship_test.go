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
	// Approval events (seq 59, 159, ...: 5 of each finished call's 500, none of a running
	// call's 40) land in their own columns.
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE kind = 'approval' AND approval_outcome = 'approved' AND approval_id = 'a1b2c3d4e5f6' AND approval_action = 'unlink' AND approval_by = 'alice' AND approval_channel = 'api' AND approval_latency_ns = 1500000000 AND path = '/ws/reports/a' AND rule = 'delete-reports' AND syscall = 'unlinkat'"); n != 6*5 {
		t.Fatalf("approval rows: %d, want %d", n, 6*5)
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
	// dropped.dns, mapped by hand: call c dropped c queries
	if n := count(t, conn, "SELECT sum(dropped_dns) FROM "+db+".calls"); n != 0+1+2+3+4+5 {
		t.Fatalf("dropped dns queries: %d, want 15", n)
	}
	// The surfaces, one row per call and surface: calls 0..5, call 4 with none (a record of
	// before surfaces); policy enforced by landlock, violated where the call had a denial
	// (the even ones); observability degraded where the trail is incomplete (c%3 == 2).
	if n := count(t, conn, "SELECT count() FROM "+db+".calls ARRAY JOIN surfaces AS surface, surface_states AS state WHERE length(surfaces) = 6"); n != 5*6 {
		t.Fatalf("surface rows: %d, want %d", n, 5*6)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls WHERE length(surface_reasons) = 6"); n != 5 {
		t.Fatalf("calls with a reason per surface: %d, want 5", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls ARRAY JOIN surfaces AS surface, surface_states AS state, surface_layers AS layers, surface_violations AS v "+
		"WHERE surface = 'policy' AND state = 'enforced' AND layers = ['landlock'] AND v = 1"); n != 2 {
		t.Fatalf("violated policy surfaces: %d, want 2 (calls 0 and 2; call 4 has no surfaces)", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls ARRAY JOIN surfaces AS surface, surface_states AS state "+
		"WHERE surface = 'observability' AND state = 'absent'"); n != 5 {
		t.Fatalf("absent observability: %d, want 5 (the test records name no trace layer)", n)
	}
	// dns events: the name in path, the rcode in errno, their own type and verdict columns
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE kind = 'dns' AND path = 'api.github.com' AND dns_type = 'A' AND dns_verdict = 'allowed' AND errno = 'NOERROR' AND rule = 'spec.network.egress[0]'"); n != 6*5+2 {
		t.Fatalf("allowed dns events: %d rows, want %d", n, 6*5+2)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE kind = 'dns' AND dns_type = 'TXT' AND dns_verdict = 'refused' AND errno = 'REFUSED'"); n != 6*5+2 {
		t.Fatalf("refused dns events: %d rows, want %d", n, 6*5+2)
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
