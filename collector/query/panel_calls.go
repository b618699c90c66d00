package query

import (
	"fmt"
	"time"
)

// callsWhere filters a calls row by every filter a calls panel offers.
func (p *Params) callsWhere() string {
	c := []string{p.between("start_time"), p.scope("node")}
	if p.EndReason != "" {
		c = append(c, "end_reason = "+Quote(p.EndReason))
	}
	switch p.Complete {
	case "true":
		c = append(c, "complete = 1")
	case "false":
		c = append(c, "complete = 0")
	}
	if p.Surface != "" {
		c = append(c, violated(p.Surface))
	}
	if p.Text != "" {
		t := Quote(p.Text)
		c = append(c, "positionCaseInsensitive(concat(call_id, ' ', call_key, ' ', tool, ' ', arrayStringConcat(argv, ' '), ' ', end_detail, ' ', incomplete_reason), "+t+") > 0"+
			" OR call_key IN (SELECT call_key FROM "+p.t("events")+" WHERE "+
			and(p.between("time"), p.scope(""), "positionCaseInsensitive(concat(path, ' ', syscall, ' ', rule, ' ', exe), "+t+") > 0")+")")
	}
	return and(c...)
}

func init() {
	register("calls", "calls in the range: filters tenant, tool, host, surface (violated), end reason, complete, free text", func(p *Params) []Statement {
		return []Statement{{Name: "calls", Shape: Table, SQL: fmt.Sprintf(`SELECT start_time AS time, tenant, tool, call_id, call_key, end_reason,
    exit_status, round(duration_ns / 1e6, 3) AS duration_ms, complete, incomplete_reason,
    arraySum(denial_counts) AS denials, alerts, dropped_kernel + dropped_user + dropped_dns AS dropped, node AS host,
    arrayStringConcat(argv, ' ') AS command
FROM %s
WHERE %s
ORDER BY start_time DESC, call_key
LIMIT %d`, p.t("calls"), p.callsWhere(), p.Limit)}}
	})

	register("stats", "one row: calls, calls with violations, incomplete records, dropped events", func(p *Params) []Statement {
		return []Statement{{Name: "stats", Shape: Table, SQL: fmt.Sprintf(`SELECT count() AS calls,
    countIf(%s) AS calls_with_violations,
    countIf(complete = 0) AS incomplete,
    sum(dropped_kernel + dropped_user + dropped_dns) AS dropped_events
FROM %s
WHERE %s`, anyViolation(), p.t("calls"), p.callsWhere())}}
	})

	registerE("matrix", "tools × surfaces: each cell the worst state of the tool's calls on the surface, with violation counts and a degraded surface's reasons (Tables.MatrixWithReasons)", func(p *Params) ([]Statement, error) {
		f := Filter{Since: p.From, Until: p.To.Add(time.Nanosecond), Tools: p.Tools, Tenants: p.Tenants, Hosts: p.Hosts,
			Surface: p.Surface, EndReason: p.EndReason, Text: p.Text}
		if p.Complete != "" {
			c := p.Complete == "true"
			f.Complete = &c
		}
		q, err := Tables{Database: p.Database, Dialect: p.Dialect}.MatrixWithReasons(f)
		if err != nil {
			return nil, err
		}
		return []Statement{{Name: "matrix", Shape: Matrix, SQL: q.SQL, Args: q.Args}}, nil
	})

	register("violations_over_time", "denials, alerts and limit hits per step, a series per surface", func(p *Params) []Statement {
		return []Statement{{Name: "violations", Shape: Series, SQL: fmt.Sprintf(`SELECT time, surface, sum(n) AS violations FROM (
    SELECT %s AS time, visitParamExtractString(detail, 'surface') AS surface, count() AS n
    FROM %s WHERE %s GROUP BY time, surface
    UNION ALL
    SELECT %s AS time, surface, count() AS n
    FROM %s WHERE %s GROUP BY time, surface
    UNION ALL
    SELECT %s AS time, 'resource' AS surface, count() AS n
    FROM %s WHERE %s GROUP BY time
)
GROUP BY time, surface
ORDER BY time, surface`,
			p.bucket("time"), p.t("events"), and(p.between("time"), p.scope(""), "kind = 'denial'", p.surfaceIs("visitParamExtractString(detail, 'surface')")),
			p.bucket("time"), p.t("alerts"), and(p.between("time"), p.scope(""), p.surfaceIs("surface")),
			p.bucket("time"), p.t("events"), and(p.between("time"), p.scope(""), "kind = 'limit'", p.surfaceIs("'resource'")))}}
	})

	register("top_tools", "tools by violations (denials, alerts, limit hits) in the range", func(p *Params) []Statement {
		return []Statement{{Name: "top_tools", Shape: Table, SQL: fmt.Sprintf(`SELECT tool, sum(d) AS denials, sum(a) AS alerts, sum(l) AS limits, sum(d + a + l) AS violations
FROM (
    SELECT tool, count() AS d, toUInt64(0) AS a, toUInt64(0) AS l FROM %s WHERE %s GROUP BY tool
    UNION ALL
    SELECT tool, toUInt64(0) AS d, count() AS a, toUInt64(0) AS l FROM %s WHERE %s GROUP BY tool
    UNION ALL
    SELECT tool, toUInt64(0) AS d, toUInt64(0) AS a, count() AS l FROM %s WHERE %s GROUP BY tool
)
GROUP BY tool
ORDER BY violations DESC, tool
LIMIT %d`,
			p.t("events"), and(p.between("time"), p.scope(""), "kind = 'denial'", p.surfaceIs("visitParamExtractString(detail, 'surface')")),
			p.t("alerts"), and(p.between("time"), p.scope(""), p.surfaceIs("surface")),
			p.t("events"), and(p.between("time"), p.scope(""), "kind = 'limit'", p.surfaceIs("'resource'")), p.Limit)}}
	})

	register("drops", "dropped events (ring buffer, agent queue), dropped DNS queries and incomplete records per step", func(p *Params) []Statement {
		return []Statement{{Name: "drops", Shape: Series, SQL: fmt.Sprintf(`SELECT %s AS time, sum(dropped_kernel) AS dropped_kernel, sum(dropped_user) AS dropped_user, sum(dropped_dns) AS dropped_dns,
    countIf(complete = 0) AS incomplete, count() AS calls
FROM %s
WHERE %s
GROUP BY time
ORDER BY time`, p.bucket("start_time"), p.t("calls"), p.callsWhere())}}
	})

	register("completeness", "per host: calls, incomplete records, dropped and aggregated events", func(p *Params) []Statement {
		return []Statement{{Name: "completeness", Shape: Table, SQL: fmt.Sprintf(`SELECT node AS host, count() AS calls, countIf(complete = 0) AS incomplete,
    sum(dropped_kernel) AS dropped_kernel, sum(dropped_user) AS dropped_user, sum(dropped_dns) AS dropped_dns, sum(aggregated) AS aggregated,
    round(100 * countIf(complete = 1) / count(), 2) AS complete_percent
FROM %s
WHERE %s
GROUP BY host
ORDER BY incomplete DESC, host`, p.t("calls"), p.callsWhere())}}
	})

	register("ingest_lag", "per host: the newest call record in ClickHouse and how old it is", func(p *Params) []Statement {
		return []Statement{{Name: "ingest_lag", Shape: Table, SQL: fmt.Sprintf(`SELECT node AS host, max(end_time) AS last_record, toInt64(now()) - toInt64(max(toDateTime(end_time))) AS lag_seconds, count() AS calls
FROM %s
WHERE %s
GROUP BY host
ORDER BY lag_seconds DESC, host`, p.t("calls"), and(p.between("start_time"), p.scope("node")))}}
	})

	register("backlog", "per host: calls started with no record shipped yet (running, or their record not shipped)", func(p *Params) []Statement {
		return []Statement{{Name: "backlog", Shape: Table, SQL: fmt.Sprintf(`SELECT node AS host, count() AS open_calls, min(start_time) AS oldest_start
FROM %s
WHERE %s AND call_key NOT IN (SELECT call_key FROM %s WHERE %s)
GROUP BY host
ORDER BY open_calls DESC, host`, p.t("call_starts"), and(p.between("start_time"), p.scope("node")), p.t("calls"), p.between("start_time"))}}
	})

	register("values", "values for a template variable: field tenant, tool, host or call (recent calls)", func(p *Params) []Statement {
		var sql string
		switch p.Field {
		case "tenant", "tool":
			sql = fmt.Sprintf("SELECT DISTINCT %s AS text, %s AS value FROM %s WHERE %s ORDER BY text LIMIT %d", p.Field, p.Field, p.t("call_starts"), and(p.between("start_time"), in("tenant", p.Tenants)), p.Limit)
		case "host":
			sql = fmt.Sprintf("SELECT DISTINCT node AS text, node AS value FROM %s WHERE %s ORDER BY text LIMIT %d", p.t("call_starts"), and(p.between("start_time"), in("tenant", p.Tenants)), p.Limit)
		default: // recent calls, newest first
			sql = fmt.Sprintf(`SELECT concat(toString(start_time), ' ', tool, ' ', call_id) AS text, if(call_key = '', call_id, call_key) AS value
FROM %s WHERE %s ORDER BY start_time DESC LIMIT %d`, p.t("call_starts"), and(p.between("start_time"), p.scope("node")), p.Limit)
		}
		return []Statement{{Name: "values", Shape: Values, SQL: sql}}
	})
}

// surfaceIs filters on the surface filter, if any.
func (p *Params) surfaceIs(col string) string {
	if p.Surface == "" {
		return ""
	}
	return col + " = " + Quote(p.Surface)
}
