package collector

import (
	"context"
	"strings"
	"testing"
)

// A batch sent as several blocks of one INSERT is stored as one part, every row of it, and a
// block the server refuses fails the whole INSERT: nothing is stored, and the error comes back
// (the cursor must not move past rows ClickHouse does not have).
func TestInsertBlocksOnePart(t *testing.T) {
	s := server(t)
	conn := connect(t, freshDB(t, s))
	ctx := context.Background()
	db := ""
	if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	// throwIf refuses a row when the server computes the column, after the blocks arrived.
	if err := conn.Exec(ctx, "CREATE TABLE blocks (n UInt64, s String, bad UInt8 MATERIALIZED throwIf(n = 999999)) ENGINE = MergeTree ORDER BY n"); err != nil {
		t.Fatal(err)
	}
	rowsOf := func(n int, last uint64) []column {
		ns, ss := make([]uint64, n), make([]string, n)
		for i := range ns {
			ns[i], ss[i] = uint64(i), strings.Repeat("x", i%50)
		}
		ns[n-1] = last
		return []column{{"n", ns}, {"s", ss}}
	}
	n := 3*insertBlock + 17
	if err := insert(ctx, conn, db+".blocks", rowsOf(n, uint64(n-1)), insertBlock); err != nil {
		t.Fatal(err)
	}
	if got := count(t, conn, "SELECT count() FROM blocks"); got != uint64(n) {
		t.Fatalf("%d rows stored, want %d", got, n)
	}
	if got := count(t, conn, "SELECT sum(length(s)) FROM blocks"); got != uint64(n/50*1225+(n%50)*(n%50-1)/2) {
		t.Fatalf("string column sums to %d", got)
	}
	var parts []string
	if err := conn.QueryRow(ctx, "SELECT groupArray(name) FROM system.parts WHERE database = currentDatabase() AND table = 'blocks'").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0] != "all_1_1_0" {
		t.Fatalf("parts %v: want the one part of one insert (all_1_1_0)", parts)
	}

	if err := insert(ctx, conn, db+".blocks", rowsOf(n, 999999), insertBlock); err == nil || !strings.Contains(err.Error(), "throwIf") {
		t.Fatalf("insert with a refused row in its last block: %v, want the server's error", err)
	}
	if got := count(t, conn, "SELECT count() FROM blocks"); got != uint64(n) {
		t.Fatalf("%d rows after the refused insert, want the %d from before", got, n)
	}
}
