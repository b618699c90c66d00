package collector

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Migrate applies the schema's migrations that the server's schema_migrations does not list.
// Every statement is idempotent (IF NOT EXISTS), so two collectors starting at once, or one
// dying half way, leave a correct schema behind; the version is recorded after its statements.
func Migrate(ctx context.Context, conn driver.Conn, o SchemaOptions, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	ms, err := Migrations(o)
	if err != nil {
		return err
	}
	if err := conn.Exec(ctx, o.MigrationsTable()); err != nil {
		return fmt.Errorf("create %s.schema_migrations: %w", o.Database, err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT DISTINCT version FROM "+o.Database+".schema_migrations")
	if err != nil {
		return fmt.Errorf("read %s.schema_migrations: %w", o.Database, err)
	}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("read %s.schema_migrations: %w", o.Database, err)
		}
		applied[int(v)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s.schema_migrations: %w", o.Database, err)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if done, err := columnAdded(ctx, conn, stmt); err != nil {
				return fmt.Errorf("schema migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			} else if done {
				continue
			}
			if err := conn.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("schema migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+o.Database+".schema_migrations (version, name, dialect, applied_at)")
		if err != nil {
			return fmt.Errorf("record schema migration %04d: %w", m.Version, err)
		}
		if err := b.Append(uint32(m.Version), m.Name, string(o.Dialect), time.Now()); err != nil {
			b.Abort()
			return fmt.Errorf("record schema migration %04d: %w", m.Version, err)
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("record schema migration %04d: %w", m.Version, err)
		}
		log.Info("schema migration applied", "version", m.Version, "name", m.Name, "dialect", o.Dialect, "database", o.Database)
	}
	return nil
}

var addColumnStmt = regexp.MustCompile(`^ALTER TABLE (\w+)\.(\w+)(?: ON CLUSTER \w+)? ADD COLUMN (\w+) `)

// columnAdded says whether stmt adds a column that is there already. Old servers (18.16) have
// no ADD COLUMN IF NOT EXISTS, and a collector that died between an ALTER and recording its
// migration must not fail on it the next time.
func columnAdded(ctx context.Context, conn driver.Conn, stmt string) (bool, error) {
	m := addColumnStmt.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	var n uint64
	err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?", m[1], m[2], m[3]).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up column %s.%s.%s: %w", m[1], m[2], m[3], err)
	}
	return n > 0, nil
}

// MigrateDSN connects to one server and applies the schema there: what an operator runs on
// every node of a cluster (Cluster set) when distributed DDL (ON CLUSTER) is not available.
func MigrateDSN(ctx context.Context, dsn, cluster string, retention time.Duration, log *slog.Logger) error {
	opts, db, err := parseDSN(dsn)
	if err != nil {
		return err
	}
	conn, err := dialCreating(ctx, opts, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	d, _, err := serverDialect(ctx, conn, db)
	if err != nil {
		return err
	}
	return Migrate(ctx, conn, SchemaOptions{Database: db, Dialect: d, Retention: retention, Cluster: cluster}, log)
}
