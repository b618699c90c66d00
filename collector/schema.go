package collector

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Dialect is the flavour of DDL a server gets.
type Dialect string

const (
	// Legacy is the compatible subset for old servers such as Debian's 18.16: DateTime plus a
	// nanoseconds column, FixedString(16) addresses, plain String, no TTL, no codecs.
	Legacy Dialect = "legacy"
	// Modern uses DateTime64(9), LowCardinality, IPv6, codecs and TTL retention.
	Modern Dialect = "modern"
)

// modernSince is the first server version with everything the modern DDL uses (DateTime64
// arrived in 20.1, 20.3 is the LTS that has it with TTL, codecs, IPv6 and LowCardinality).
var modernSince = [2]int{20, 3}

// DialectFor picks the DDL dialect for a server version such as "18.16.1" or "24.8.4.13".
func DialectFor(version string) (Dialect, error) {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("parse clickhouse version %q", version)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("parse clickhouse version %q", version)
	}
	if major > modernSince[0] || (major == modernSince[0] && minor >= modernSince[1]) {
		return Modern, nil
	}
	return Legacy, nil
}

// SchemaOptions says how to render the DDL.
type SchemaOptions struct {
	Database  string
	Dialect   Dialect
	Retention time.Duration // TTL of every table (modern only); 0 keeps rows forever

	// Cluster, when set, renders the sharded layout: every table T becomes T_local on each
	// shard and T, a Distributed table over the cluster's T_local sharded by
	// cityHash64(call_id), so that all rows of one call live on one shard.
	Cluster string
	// OnCluster adds ON CLUSTER to every statement (distributed DDL, needs ZooKeeper);
	// without it the DDL is applied node by node.
	OnCluster bool
	// Replicated uses ReplicatedReplacingMergeTree for the shard-local tables (needs
	// ZooKeeper and the {shard} and {replica} macros on every node).
	Replicated bool
}

// Migration is one schema version: statements applied in order, each idempotent.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

//go:embed schema
var schemaFS embed.FS

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// identifier checks names that go into DDL unquoted.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (o SchemaOptions) check() error {
	if o.Dialect != Legacy && o.Dialect != Modern {
		return fmt.Errorf("unknown schema dialect %q", o.Dialect)
	}
	if !identifier.MatchString(o.Database) {
		return fmt.Errorf("database name %q is not a plain identifier", o.Database)
	}
	if o.Cluster != "" && !identifier.MatchString(o.Cluster) {
		return fmt.Errorf("cluster name %q is not a plain identifier", o.Cluster)
	}
	if (o.OnCluster || o.Replicated) && o.Cluster == "" {
		return fmt.Errorf("on-cluster and replicated DDL need a cluster name")
	}
	if o.Retention < 0 {
		return fmt.Errorf("negative retention %s", o.Retention)
	}
	return nil
}

// Table is the name the collector inserts into and queries: the Distributed table in the
// sharded layout, the table itself otherwise.
func (o SchemaOptions) Table(name string) string { return o.Database + "." + name }

func (o SchemaOptions) onCluster() string {
	if o.OnCluster {
		return " ON CLUSTER " + o.Cluster
	}
	return ""
}

// MigrationsTable is the DDL of schema_migrations: one row per applied version. It is kept on
// every node (never distributed), since every node's tables are migrated.
func (o SchemaOptions) MigrationsTable() string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.schema_migrations%s (\n"+
		"    version UInt32,\n    name String,\n    dialect String,\n    applied_at DateTime\n"+
		") ENGINE = ReplacingMergeTree()\nORDER BY version", o.Database, o.onCluster())
}

// tableRenderer is what a migration template sees.
type tableRenderer struct {
	o       SchemaOptions
	created []string
	altered []string
}

// Alter names a table an ALTER changes: in the sharded layout the shard-local table, and the
// Distributed table over it gets the same ALTER (renderMigration adds it).
func (r *tableRenderer) Alter(name string) string {
	if r.o.Cluster != "" {
		r.altered = append(r.altered, name)
		return r.o.Database + "." + name + "_local"
	}
	return r.o.Database + "." + name
}

func (r *tableRenderer) T(name string) string {
	r.created = append(r.created, name)
	if r.o.Cluster != "" {
		return r.o.Database + "." + name + "_local"
	}
	return r.o.Database + "." + name
}

func (r *tableRenderer) OnCluster() string { return r.o.onCluster() }

func (r *tableRenderer) Engine(name string) string {
	if r.o.Replicated {
		return fmt.Sprintf("ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/%s/%s_local', '{replica}')", r.o.Database, name)
	}
	return "ReplacingMergeTree()"
}

func (r *tableRenderer) TTL(column string) string {
	if r.o.Dialect != Modern || r.o.Retention <= 0 {
		return ""
	}
	days := int((r.o.Retention + 24*time.Hour - 1) / (24 * time.Hour))
	return fmt.Sprintf("\nTTL toDateTime(%s) + INTERVAL %d DAY", column, days)
}

// Migrations renders the dialect's migrations, oldest first.
func Migrations(o SchemaOptions) ([]Migration, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	dir := path.Join("schema", string(o.Dialect))
	ents, err := fs.ReadDir(schemaFS, dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded schema %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range ents {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		version, _ := strconv.Atoi(m[1])
		text, err := fs.ReadFile(schemaFS, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read embedded schema %s: %w", e.Name(), err)
		}
		stmts, err := renderMigration(o, e.Name(), string(text))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: version, Name: m[2], Statements: stmts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("schema %s: two migrations with version %d", o.Dialect, out[i].Version)
		}
	}
	return out, nil
}

func renderMigration(o SchemaOptions, name, text string) ([]string, error) {
	tmpl, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse schema %s: %w", name, err)
	}
	r := &tableRenderer{o: o}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, r); err != nil {
		return nil, fmt.Errorf("render schema %s: %w", name, err)
	}
	stmts := splitStatements(b.String())
	if o.Cluster != "" {
		for _, t := range r.created {
			stmts = append(stmts, fmt.Sprintf(
				"CREATE TABLE IF NOT EXISTS %s.%s%s AS %s.%s_local\nENGINE = Distributed(%s, %s, %s_local, cityHash64(call_id))",
				o.Database, t, o.onCluster(), o.Database, t, o.Cluster, o.Database, t))
		}
		if len(r.altered) > 0 {
			// A Distributed table does not follow its local tables' columns by itself.
			for _, s := range stmts {
				for _, t := range r.altered {
					local := "ALTER TABLE " + o.Database + "." + t + "_local"
					if strings.HasPrefix(s, local+" ") {
						stmts = append(stmts, "ALTER TABLE "+o.Database+"."+t+strings.TrimPrefix(s, local))
						break
					}
				}
			}
		}
	}
	return stmts, nil
}

// splitStatements cuts SQL text at semicolons that end a line and drops comment lines.
func splitStatements(text string) []string {
	var out []string
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if strings.HasSuffix(trimmed, ";") {
			cur = append(cur, strings.TrimSuffix(strings.TrimRight(line, " \t"), ";"))
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// DDL is the whole schema as one script: what the collector applies, for review or for
// applying by hand (berm-collector --print-ddl).
func DDL(o SchemaOptions) (string, error) {
	ms, err := Migrations(o)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- berm collector schema: dialect %s", o.Dialect)
	if o.Cluster != "" {
		fmt.Fprintf(&b, ", sharded over cluster %s", o.Cluster)
	}
	b.WriteString("\n\n")
	b.WriteString(o.MigrationsTable())
	b.WriteString(";\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- migration %04d %s\n", m.Version, m.Name)
		for _, s := range m.Statements {
			b.WriteString("\n")
			b.WriteString(s)
			b.WriteString(";\n")
		}
	}
	return b.String(), nil
}
