package collector

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/journal"
)

// BenchmarkShip measures journal → ClickHouse against a raw clickhouse-go batch insert of the
// same rows, in the same run, on the same server: each iteration ships the whole journal
// with the collector (read, decode, batch, insert, cursor) into a fresh database, then inserts
// the same rows, decoded beforehand, straight through clickhouse-go into another. It reports
// both rates in events per second and their ratio (the target is ≥ 0.8).
//
//	go test -run '^$' -bench . -benchtime 3x ./collector/
func BenchmarkShip(b *testing.B) {
	s := server(b)
	const calls, perCall = 40, 5000
	state := b.TempDir()
	writeCalls(b, state, "bench", calls, perCall, 100, true)
	rows := decodeAll(b, state)
	events := float64(calls * perCall)
	ctx := context.Background()
	admin := connect(b, s.DSN("default"))
	quiet := slog.New(slog.DiscardHandler)

	var shipTime, rawTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		shipDSN, rawDSN := freshDB(b, s), freshDB(b, s)
		for _, dsn := range []string{shipDSN, rawDSN} {
			if err := MigrateDSN(ctx, dsn, "", 0, quiet); err != nil {
				b.Fatal(err)
			}
		}
		os.RemoveAll(filepath.Join(state, "collector"))
		b.StartTimer()

		t0 := time.Now()
		c, err := New(Config{StateDir: state, DSN: shipDSN, Registry: prometheus.NewRegistry(), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.RunOnce(ctx); err != nil {
			b.Fatal(err)
		}
		c.Close()
		shipTime += time.Since(t0)

		raw := connect(b, rawDSN)
		t0 = time.Now()
		if err := rawInsert(ctx, raw, dbOf(rawDSN), rows); err != nil {
			b.Fatal(err)
		}
		rawTime += time.Since(t0)

		b.StopTimer()
		for _, dsn := range []string{shipDSN, rawDSN} {
			if n := count(b, admin, "SELECT count() FROM "+dbOf(dsn)+".events"); n != uint64(events) {
				b.Fatalf("%s holds %d events, want %v", dsn, n, events)
			}
			admin.Exec(ctx, "DROP DATABASE "+dbOf(dsn))
		}
		b.StartTimer()
	}
	ship := events * float64(b.N) / shipTime.Seconds()
	raw := events * float64(b.N) / rawTime.Seconds()
	b.ReportMetric(ship, "collector_events/s")
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(ship/raw, "ratio")
	b.ReportMetric(0, "ns/op")
}

func dbOf(dsn string) string {
	_, db, _ := parseDSN(dsn)
	return db
}

// decodeAll turns the journal into the rows the collector would insert, in batches of the
// collector's default size.
func decodeAll(b *testing.B, state string) []*batch {
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

// rawInsert is the peer: clickhouse-go's batch insert with typed columns, nothing else.
func rawInsert(ctx context.Context, conn driver.Conn, db string, batches []*batch) error {
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
			names := ""
			for i, c := range t.cols {
				if i > 0 {
					names += ", "
				}
				names += c.name
			}
			pb, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (%s)", db, t.table, names))
			if err != nil {
				return err
			}
			for i, c := range t.cols {
				if err := pb.Column(i).Append(c.values); err != nil {
					return err
				}
			}
			if err := pb.Send(); err != nil {
				return err
			}
		}
	}
	return nil
}
