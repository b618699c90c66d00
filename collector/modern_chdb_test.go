package collector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/collector/query"
	"github.com/bermsec/berm/testenv/chdb"
)

// inline puts a query's positional arguments into its text as ClickHouse literals: chdb's
// bindings name their parameters, berm's queries number them (18.16 has none server-side).
func inline(t *testing.T, sql string, args []any) string {
	t.Helper()
	var b strings.Builder
	n, in := 0, false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case in && c == '\\':
			b.WriteByte(c)
			i++
			if i < len(sql) {
				b.WriteByte(sql[i])
			}
			continue
		case c == '\'':
			in = !in
		case !in && c == '?':
			if n >= len(args) {
				t.Fatalf("more ? than arguments in %s", sql)
			}
			b.WriteString(literal(t, args[n]))
			n++
			continue
		}
		b.WriteByte(c)
	}
	if n != len(args) {
		t.Fatalf("%d arguments for %d ? in %s", len(args), n, sql)
	}
	return b.String()
}

func literal(t *testing.T, v any) string {
	switch v := v.(type) {
	case string:
		return query.Quote(v)
	case time.Time:
		return fmt.Sprintf("toDateTime64('%s', 9, 'UTC')", v.UTC().Format("2006-01-02 15:04:05.000000000"))
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = query.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case int, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v)
	case bool:
		if v {
			return "1"
		}
		return "0"
	}
	t.Fatalf("an argument of type %T: give it a literal", v)
	return ""
}

// The modern dialect on a modern ClickHouse: every modern migration, in order, then rows shaped
// like the collector's, then every read query of the dialect (the CLI's calls, timeline and
// matrix, every Grafana panel's statements) run on chdb's engine (ClickHouse 26.x). The native
// inserts stay tested on Debian's 18.16 server.
func TestTheModernDialectRunsOnAModernClickHouse(t *testing.T) {
	eng := chdb.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := SchemaOptions{Database: "berm", Dialect: Modern, Retention: 90 * 24 * time.Hour}
	ms, err := Migrations(o)
	if err != nil {
		t.Fatal(err)
	}
	type step struct{ what, sql string }
	steps := []step{{"create database", "CREATE DATABASE IF NOT EXISTS berm"}, {"migrations table", o.MigrationsTable()}}
	for _, m := range ms {
		for i, s := range m.Statements {
			steps = append(steps, step{fmt.Sprintf("migration %04d_%s statement %d", m.Version, m.Name, i+1), s})
		}
	}
	migrations := len(steps)
	// rows as the collector writes them (a subset of columns, the rest their defaults): a call
	// started and ended on node-a, with a violated isolation surface, and its events
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return literal(t, t0.Add(d)) }
	steps = append(steps,
		step{"insert call_starts", "INSERT INTO berm.call_starts (tenant, tool, call_id, call_key, start_time, node, policy, argv, raw) VALUES ('acme', 'shell', 'c1', 'k1', " + at(0) + ", 'node-a', 'strict', ['sh','-c','cat /etc/shadow'], '{}')"},
		step{"insert calls", "INSERT INTO berm.calls (tenant, tool, call_id, call_key, start_time, end_time, duration_ns, node, policy, argv, end_reason, complete, surfaces, surface_states, surface_violations, raw) VALUES ('acme', 'shell', 'c1', 'k1', " + at(0) + ", " + at(time.Second) + ", 1000000000, 'node-a', 'strict', ['sh','-c','cat /etc/shadow'], 'exit', 1, ['isolation'], ['violated'], [1], '{}')"},
		step{"insert events", "INSERT INTO berm.events (tenant, tool, call_id, call_key, seq, time, kind, pid, path) VALUES ('acme', 'shell', 'c1', 'k1', 1, " + at(time.Millisecond) + ", 'exec', 10, '/bin/cat'), ('acme', 'shell', 'c1', 'k1', 2, " + at(2*time.Millisecond) + ", 'denial', 10, '/etc/shadow')"},
	)
	inserts := len(steps)

	tables := query.Tables{Database: "berm", Dialect: query.Modern}
	f := query.Filter{Since: t0.Add(-time.Hour), Until: t0.Add(time.Hour), Tenant: "acme", Hosts: []string{"node-a"}, Text: "shadow"}
	type read struct {
		name string
		q    query.Query
		err  error
	}
	var reads []read
	add := func(name string) func(query.Query, error) {
		return func(q query.Query, err error) { reads = append(reads, read{name, q, err}) }
	}
	add("cli calls: starts")(tables.CallStartRaws(f))
	add("cli calls: records")(tables.CallRecordRaws(f))
	add("cli timeline: starts by id")(tables.CallStartsByID("acme/c1"))
	add("cli timeline: records of")(tables.CallRecordsOf("acme", "c1"))
	add("cli timeline: events")(tables.Events(eventReadColumns, "acme", "shell", "c1", "k1"))
	add("cli matrix")(tables.Matrix(f))
	for _, qt := range query.Types() {
		stmts, err := query.Build(qt[0], query.Params{Database: "berm", Dialect: query.Modern, From: t0.Add(-time.Hour), To: t0.Add(time.Hour),
			Bucket: time.Minute, Tenants: []string{"acme"}, Tools: []string{"shell"}, Hosts: []string{"node-a"}, Call: "k1", Field: "call"})
		if err != nil {
			t.Fatalf("panel %s: %v", qt[0], err)
		}
		for _, st := range stmts {
			reads = append(reads, read{"panel " + qt[0] + ": " + st.Name, query.Query{SQL: st.SQL, Args: st.Args}, nil})
		}
	}
	for _, r := range reads {
		if r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
		steps = append(steps, step{r.name, inline(t, r.q.SQL, r.q.Args)})
	}

	sqls := make([]string, len(steps))
	for i, s := range steps {
		sqls[i] = s.sql
	}
	res, err := eng.Run(ctx, sqls)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != "" {
			t.Errorf("%s failed on ClickHouse 26 (chdb): %.600s\n%s", steps[i].what, r.Err, steps[i].sql)
		}
	}
	got := func(what string) string {
		for i, s := range steps {
			if s.what == what {
				return res[i].Out
			}
		}
		t.Fatalf("no step %s", what)
		return ""
	}
	// the reads find the rows, not only parse
	if out := got("cli calls: records"); !strings.Contains(out, `"raw":"{}"`) {
		t.Errorf("the CLI's calls query found no call: %q", out)
	}
	if out := got("cli matrix"); !strings.Contains(out, `"surface":"isolation"`) || !strings.Contains(out, `"violations":"1"`) && !strings.Contains(out, `"violations":1`) {
		t.Errorf("the matrix query did not fold the call's violated surface: %q", out)
	}
	if out := got("cli timeline: events"); strings.Count(out, "\n") != 2 {
		t.Errorf("the timeline's events query: %q, want the call's two events", out)
	}
	t.Logf("on chdb: %d migration statements, %d inserts, %d read queries", migrations, inserts-migrations, len(reads))
}
