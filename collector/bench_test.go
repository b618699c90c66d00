package collector

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/journal"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// BenchmarkShip measures journal → ClickHouse against a raw clickhouse-go batch insert of the
// same rows, in the same run, on the same server: each iteration ships the whole journal
// with the collector (read, decode, batch, insert, cursor) into a fresh database, then inserts
// the same rows, decoded beforehand, straight through clickhouse-go into another. The peer
// sends rows as the collector does (one INSERT per batch, in blocks of insertBlock rows), so
// ratio is what the collector's own work costs (the target is ≥ 0.8). A second peer sends each
// batch as a single block, clickhouse-go's plain PrepareBatch/Append/Send: ratio_oneblock
// compares against that.
//
//	go test -run '^$' -bench . -benchtime 5x ./collector/
func BenchmarkShip(b *testing.B) {
	s := server(b)
	state := b.TempDir()
	writeCalls(b, state, "bench", benchCalls, benchPerCall, 100, true)
	events := float64(benchCalls * benchPerCall)

	// Sides take turns going first, and each database is dropped right after its round
	// (stopping its background merges), so no side pays for another's work. The machine is
	// shared and noisy: the medians of the rounds are reported.
	var shipRates, rawRates, oneRates, ratios, oneRatios []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var shipRate, rawRate, oneRate float64
		sides := []func(){
			func() { shipRate = events / shipRound(b, s, state).Seconds() },
			func() { rawRate = events / rawRound(b, s, state, insertBlock).Seconds() },
			func() { oneRate = events / rawRound(b, s, state, 0).Seconds() },
		}
		for k := 0; k < i%3; k++ {
			sides = append(sides[1:], sides[0])
		}
		for _, side := range sides {
			side()
		}
		shipRates, rawRates, oneRates = append(shipRates, shipRate), append(rawRates, rawRate), append(oneRates, oneRate)
		ratios, oneRatios = append(ratios, shipRate/rawRate), append(oneRatios, shipRate/oneRate)
	}
	b.ReportMetric(median(shipRates), "collector_events/s")
	b.ReportMetric(median(rawRates), "raw_events/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(oneRates), "raw_oneblock_events/s")
	b.ReportMetric(median(oneRatios), "ratio_oneblock")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchDB makes a database with the schema, outside the timing.
func benchDB(b *testing.B, s *chtest.Server) string {
	b.StopTimer()
	defer b.StartTimer()
	dsn := freshDB(b, s)
	if err := MigrateDSN(context.Background(), dsn, "", 0, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	return dsn
}

// dropDB checks that the round stored every event and drops its database.
func dropDB(b *testing.B, s *chtest.Server, dsn string) {
	b.StopTimer()
	defer b.StartTimer()
	admin := connect(b, s.DSN("default"))
	if n := count(b, admin, "SELECT count() FROM "+dbOf(dsn)+".events"); n != benchCalls*benchPerCall {
		b.Fatalf("%s holds %d events, want %d", dsn, n, benchCalls*benchPerCall)
	}
	admin.Exec(context.Background(), "DROP DATABASE "+dbOf(dsn))
}

const benchCalls, benchPerCall = 60, 5000

// shipRound ships the whole journal with a new collector (fresh cursor) into a new database.
func shipRound(b *testing.B, s *chtest.Server, state string) time.Duration {
	dsn := benchDB(b, s)
	os.RemoveAll(filepath.Join(state, "collector"))
	runtime.GC()
	t0 := time.Now()
	c, err := New(Config{StateDir: state, DSN: dsn, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.RunOnce(context.Background()); err != nil {
		b.Fatal(err)
	}
	c.Close()
	d := time.Since(t0)
	dropDB(b, s, dsn)
	return d
}

// rawRound inserts the rows, decoded beforehand, with clickhouse-go alone into a new database.
// The rows exist only for this round: kept across rounds they would be a large live heap that
// the collector's garbage collections would have to mark.
func rawRound(b *testing.B, s *chtest.Server, state string, block int) time.Duration {
	dsn := benchDB(b, s)
	conn := connect(b, dsn)
	b.StopTimer()
	rows := rowsOf(b, state)
	runtime.GC()
	b.StartTimer()
	t0 := time.Now()
	if err := rawInsert(context.Background(), conn, dbOf(dsn), rows, block); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	dropDB(b, s, dsn)
	return d
}

func dbOf(dsn string) string {
	_, db, _ := parseDSN(dsn)
	return db
}

// rowsOf turns the journal into the rows the collector would insert, in batches of the
// collector's default size.
func rowsOf(b *testing.B, state string) []*batch {
	var out []*batch
	cur := &batch{}
	_, err := journal.Scan(filepath.Join(state, "journal"), journal.Position{}, func(r journal.Record) error {
		if _, err := cur.add(r); err != nil {
			return err
		}
		if cur.rows() >= 50000 {
			out = append(out, cur)
			cur = &batch{}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return append(out, cur)
}

// rawInsert is the peer: clickhouse-go's batch insert with typed columns, nothing else, one
// INSERT per batch in blocks of block rows (0: one block), through the collector's own
// insert function: with block = insertBlock the ratio measures what the collector adds
// (reading and decoding the journal, the cursor, replay checks), not how rows are sent.
func rawInsert(ctx context.Context, conn driver.Conn, db string, batches []*batch, block int) error {
	for _, bt := range batches {
		for _, t := range []struct {
			table string
			cols  []column
		}{
			{"call_starts", bt.starts.columns(Legacy)}, {"calls", bt.calls.columns(Legacy)},
			{"events", bt.events.columns(Legacy)}, {"alerts", bt.alerts.columns(Legacy)},
		} {
			if rowCount(t.cols) == 0 {
				continue
			}
			if err := insert(ctx, conn, db+"."+t.table, t.cols, block); err != nil {
				return err
			}
		}
	}
	return nil
}
