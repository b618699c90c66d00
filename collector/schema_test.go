package collector

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden DDL files")

func TestDialectFor(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    Dialect
	}{
		{"18.16.1", Legacy}, {"19.17.4.11", Legacy}, {"20.1.2", Legacy}, {"20.3.21.2", Modern},
		{"21.8.15", Modern}, {"24.8.4.13", Modern}, {"25.1", Modern},
	} {
		got, err := DialectFor(tc.version)
		if err != nil || got != tc.want {
			t.Errorf("DialectFor(%q) = %q, %v; want %q", tc.version, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x.y", "18"} {
		if _, err := DialectFor(bad); err == nil {
			t.Errorf("DialectFor(%q) did not fail", bad)
		}
	}
}

// TestDDLGolden pins the DDL texts of both dialects and both layouts; modern-only features
// must appear in the modern text and never in the legacy one.
func TestDDLGolden(t *testing.T) {
	modernOnly := []string{"DateTime64", "LowCardinality", "IPv6", "CODEC(", "TTL "}
	for _, tc := range []struct {
		file string
		o    SchemaOptions
	}{
		{"legacy.sql", SchemaOptions{Database: "berm", Dialect: Legacy, Retention: 90 * 24 * time.Hour}},
		{"modern.sql", SchemaOptions{Database: "berm", Dialect: Modern, Retention: 90 * 24 * time.Hour}},
		{"legacy-cluster.sql", SchemaOptions{Database: "berm", Dialect: Legacy, Cluster: "berm"}},
		{"modern-cluster.sql", SchemaOptions{Database: "berm", Dialect: Modern, Retention: 30 * 24 * time.Hour, Cluster: "berm", OnCluster: true, Replicated: true}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := DDL(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range modernOnly {
				if has := strings.Contains(got, f); has != (tc.o.Dialect == Modern) {
					t.Errorf("%s: contains %q = %v", tc.file, f, has)
				}
			}
			if tc.o.Dialect == Modern && tc.o.Retention > 0 && !strings.Contains(got, "INTERVAL "+itoa(int(tc.o.Retention/(24*time.Hour)))+" DAY") {
				t.Errorf("%s: no TTL of the retention", tc.file)
			}
			if tc.o.Cluster != "" && strings.Count(got, "ENGINE = Distributed(berm, berm, ") != 4 {
				t.Errorf("%s: want 4 Distributed tables", tc.file)
			}
			golden := filepath.Join("testdata", "ddl", tc.file)
			if *update {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("DDL differs from %s (run with -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

func TestSchemaOptionsRejected(t *testing.T) {
	for _, o := range []SchemaOptions{
		{Database: "berm", Dialect: "postgres"},
		{Database: "berm; DROP TABLE x", Dialect: Legacy},
		{Database: "berm", Dialect: Legacy, OnCluster: true},
		{Database: "berm", Dialect: Legacy, Cluster: "a-b"},
	} {
		if _, err := DDL(o); err == nil {
			t.Errorf("DDL(%+v) did not fail", o)
		}
	}
}

// TestMigrateIdempotent applies the schema three times (as collectors restarting do) on a real
// server: one recorded version, the tables there, no error.
func TestMigrateIdempotent(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	for i := 0; i < 3; i++ {
		if err := MigrateDSN(context.Background(), dsn, "", 0, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	conn := connect(t, dsn)
	db := dsn[strings.LastIndex(dsn, "/")+1:]
	ms, err := Migrations(SchemaOptions{Database: db, Dialect: Legacy})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".schema_migrations"); n != uint64(len(ms)) {
		t.Fatalf("schema_migrations has %d rows, want %d", n, len(ms))
	}
	if n := count(t, conn, "SELECT count() FROM system.tables WHERE database = '"+db+"'"); n != 5 {
		t.Fatalf("%d tables, want 5", n)
	}
	var dialect string
	if err := conn.QueryRow(context.Background(), "SELECT any(dialect) FROM "+db+".schema_migrations").Scan(&dialect); err != nil || dialect != string(Legacy) {
		t.Fatalf("dialect %q, %v; want legacy on 18.16", dialect, err)
	}
}

// TestMigrateFromFirstVersion upgrades a database a collector of the first schema version
// made: its rows stay, the new columns appear with their defaults. An ALTER already applied
// by a collector that died before recording its migration does not stop the next one.
func TestMigrateFromFirstVersion(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	conn := connect(t, dsn)
	ctx := context.Background()
	db := dsn[strings.LastIndex(dsn, "/")+1:]
	o := SchemaOptions{Database: db, Dialect: Legacy}
	ms, err := Migrations(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 {
		t.Fatalf("%d migrations, want the first and at least one more", len(ms))
	}
	if err := conn.Exec(ctx, o.MigrationsTable()); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range ms[0].Statements {
		if err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := insert(ctx, conn, db+".schema_migrations", []column{{"version", []uint32{1}}, {"name", []string{"init"}}, {"dialect", []string{"legacy"}}, {"applied_at", []time.Time{time.Now()}}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := insert(ctx, conn, db+".events", []column{{"call_id", []string{"old-1"}}, {"seq", []uint64{1}}, {"kind", []string{"open"}}, {"detail", []string{"{}"}}}, 0); err != nil {
		t.Fatal(err)
	}
	// The collector that died: the second migration's first statement applied, not recorded.
	if err := conn.Exec(ctx, ms[1].Statements[0]); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := MigrateDSN(ctx, dsn, "", 0, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".events WHERE call_id = 'old-1' AND phase = ''"); n != 1 {
		t.Fatalf("old row after the upgrade: %d, want 1 with an empty phase", n)
	}
	if n := count(t, conn, "SELECT count() FROM system.columns WHERE database = '"+db+"' AND table = 'calls' AND name IN ('complete', 'incomplete_reason')"); n != 2 {
		t.Fatalf("calls has %d of the new columns, want 2", n)
	}
}
