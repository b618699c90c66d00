package collector

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Timeouts when the DSN does not set them: a wrong address fails in seconds, never hangs, and
// a server that stops answering mid-insert is given up on (and retried) after a minute.
const (
	defaultDialTimeout = 5 * time.Second
	defaultReadTimeout = 60 * time.Second
)

// parseDSN checks a clickhouse:// DSN and returns the client options and the database.
func parseDSN(dsn string) (*clickhouse.Options, string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("parse clickhouse dsn %q: %w", redactDSN(dsn), err)
	}
	switch u.Scheme {
	case "clickhouse", "tcp":
	default:
		return nil, "", fmt.Errorf("clickhouse dsn %q: scheme %q is not supported: use the native protocol, clickhouse://host:9000/database", redactDSN(dsn), u.Scheme)
	}
	if u.Host == "" {
		return nil, "", fmt.Errorf("clickhouse dsn %q: no host: use clickhouse://host:9000/database", redactDSN(dsn))
	}
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("parse clickhouse dsn %q: %w", redactDSN(dsn), err)
	}
	opts.Protocol = clickhouse.Native
	q := u.Query()
	if q.Get("dial_timeout") == "" {
		opts.DialTimeout = defaultDialTimeout
	}
	if q.Get("read_timeout") == "" {
		opts.ReadTimeout = defaultReadTimeout
	}
	if opts.MaxOpenConns == 0 {
		opts.MaxOpenConns = 4
	}
	db := strings.Trim(u.Path, "/")
	if db == "" {
		db = "default"
	}
	opts.Auth.Database = db
	if !identifier.MatchString(db) {
		return nil, "", fmt.Errorf("clickhouse dsn %q: database %q is not a plain identifier", redactDSN(dsn), db)
	}
	return opts, db, nil
}

// dial opens a connection and checks that the server answers.
func dial(ctx context.Context, opts *clickhouse.Options) (driver.Conn, error) {
	addr := strings.Join(opts.Addr, ",")
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("dial clickhouse %s: %w", addr, err)
	}
	// The handshake and a ping are instant on a live server: a peer that accepts and then says
	// nothing is as dead as one that refuses.
	pctx, cancel := context.WithTimeout(ctx, 2*opts.DialTimeout)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		conn.Close()
		var ex *clickhouse.Exception
		if errors.As(err, &ex) {
			return nil, fmt.Errorf("clickhouse %s refused the connection: %w", addr, err)
		}
		return nil, fmt.Errorf("dial clickhouse %s: %w", addr, err)
	}
	return conn, nil
}

// unknownDatabase is ClickHouse's error code for a database that does not exist.
const unknownDatabase = 81

// dialCreating is dial for a writer of the schema (the collector, MigrateDSN): a database
// that does not exist yet is created through the server's default database, as the tables in
// it are. When the server refuses that too, the error names the statement to run.
func dialCreating(ctx context.Context, opts *clickhouse.Options, db string) (driver.Conn, error) {
	conn, err := dial(ctx, opts)
	var ex *clickhouse.Exception
	if err == nil || !errors.As(err, &ex) || ex.Code != unknownDatabase {
		return conn, err
	}
	admin := *opts
	admin.Auth.Database = "default"
	ac, cerr := dial(ctx, &admin)
	if cerr == nil {
		cerr = ac.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+db)
		ac.Close()
	}
	if cerr != nil {
		return nil, fmt.Errorf("clickhouse %s has no database %s and creating it failed (%v): run CREATE DATABASE %s there (on every node of a cluster)",
			strings.Join(opts.Addr, ","), db, cerr, db)
	}
	return dial(ctx, opts)
}

// serverDialect reads the dialect the schema was created with, or picks one for the server.
// It is sticky: a server upgraded past 20.3 keeps its legacy tables and their dialect.
func serverDialect(ctx context.Context, conn driver.Conn, db string) (Dialect, bool, error) {
	var applied string
	row := conn.QueryRow(ctx, "SELECT dialect FROM "+db+".schema_migrations ORDER BY version DESC LIMIT 1")
	if err := row.Scan(&applied); err == nil {
		return Dialect(applied), true, nil
	}
	v, err := conn.ServerVersion()
	if err != nil {
		return "", false, fmt.Errorf("clickhouse server version: %w", err)
	}
	d, err := DialectFor(fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch))
	return d, false, err
}

// quote makes a ClickHouse string literal.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}
