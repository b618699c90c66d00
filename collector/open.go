package collector

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Schema is what a reader of the collector's tables needs to know about them: where they are,
// the dialect they were created in, and the version applied.
type Schema struct {
	Database string
	Dialect  Dialect
	Version  int // the highest migration applied (schema_migrations)
	Latest   int // the highest migration this build knows
}

// Open connects to the ClickHouse a collector ships to (DSN as for the collector) for reading,
// and reads the schema's version. A database the collector never wrote to is an error that
// says so.
func Open(ctx context.Context, dsn string) (driver.Conn, Schema, error) {
	opts, db, err := parseDSN(dsn)
	if err != nil {
		return nil, Schema{}, err
	}
	conn, err := dial(ctx, opts)
	if err != nil {
		return nil, Schema{}, err
	}
	s, err := ReadSchema(ctx, conn, db)
	if err != nil {
		conn.Close()
		return nil, Schema{}, fmt.Errorf("clickhouse %s: %w", redactDSN(dsn), err)
	}
	return conn, s, nil
}

// ReadSchema reads the dialect and version of the berm tables in db.
func ReadSchema(ctx context.Context, conn driver.Conn, db string) (Schema, error) {
	if !identifier.MatchString(db) {
		return Schema{}, fmt.Errorf("database %q is not a plain identifier", db)
	}
	var (
		version uint32
		dialect string
	)
	row := conn.QueryRow(ctx, "SELECT version, dialect FROM "+db+".schema_migrations ORDER BY version DESC LIMIT 1")
	if err := row.Scan(&version, &dialect); err != nil {
		return Schema{}, fmt.Errorf("database %s has no berm tables (schema_migrations: %w): nothing was shipped there", db, err)
	}
	s := Schema{Database: db, Dialect: Dialect(dialect), Version: int(version)}
	ms, err := Migrations(SchemaOptions{Database: db, Dialect: s.Dialect})
	if err != nil {
		return Schema{}, err
	}
	if len(ms) > 0 {
		s.Latest = ms[len(ms)-1].Version
	}
	return s, nil
}
