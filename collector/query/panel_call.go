package query

import "fmt"

func (p *Params) callWhere() string { return and(p.callIs(), in("tenant", p.Tenants)) }

func init() {
	register("call_summary", "one call: who, what, when, how it ended, and each surface's state", func(p *Params) []Statement {
		return []Statement{
			{Name: "summary", Shape: Summary, SQL: fmt.Sprintf(`SELECT tenant, tool, call_id, call_key, start_time AS start, end_time AS end,
    round(duration_ns / 1e6, 3) AS duration_ms, end_reason, end_detail, exit_status, complete, incomplete_reason,
    node AS host, policy, arrayStringConcat(argv, ' ') AS command, arrayStringConcat(layers, ', ') AS active_layers,
    events, alerts, dropped_kernel, dropped_user, dropped_dns, syscall_total
FROM %s
WHERE %s
LIMIT 1`, p.t("calls"), p.callWhere())},
			{Name: "surfaces", Shape: Matrix, SQL: fmt.Sprintf(`SELECT tool, surface, state, count() AS calls, sum(v) AS violations, %s AS inject
FROM %s
%s
WHERE %s
GROUP BY tool, surface, state`, injectCalls, p.t("calls"), surfaceJoin, p.callWhere())},
		}
	})

	register("timeline", "one call's events, in order, as log lines", func(p *Params) []Statement {
		return []Statement{{Name: "timeline", Shape: Logs, SQL: fmt.Sprintf(`SELECT %s AS time_unix_ns, seq, kind, phase, pid, ppid, comm, exe, path, syscall, rule, result, errno,
    if(kind = 'connect', %s, '') AS address, port, detail
FROM %s
WHERE %s
ORDER BY time_unix_ns, seq
LIMIT %d`, p.nanos("time", "time_ns"), addr("addr"), p.t("events"), and(p.callWhere(), p.kindIs(), "phase != 'setup'"), p.Limit)}}
	})

	register("process_tree", "one call's processes (exec and fork events) as a node graph", func(p *Params) []Statement {
		return []Statement{{Name: "process_tree", Shape: Tree, SQL: fmt.Sprintf(`SELECT seq, kind, pid, ppid, comm, path, visitParamExtractUInt(detail, 'child_pid') AS child_pid, phase
FROM %s
WHERE %s
ORDER BY time, seq
LIMIT %d`, p.t("events"), and(p.callWhere(), "kind IN ('exec', 'fork', 'exit')", "phase != 'setup'"), p.Limit)}}
	})

	register("call_files", "one call's files: each path opened, how often, how often refused", func(p *Params) []Statement {
		return []Statement{{Name: "files", Shape: Table, SQL: fmt.Sprintf(`SELECT path, count() AS opens, countIf(result < 0) AS failed, groupUniqArray(errno) AS errnos, min(time) AS first
FROM %s
WHERE %s
GROUP BY path
ORDER BY first, path
LIMIT %d`, p.t("events"), and(p.callWhere(), "kind = 'open'", "phase != 'setup'"), p.Limit)}}
	})

	register("call_network", "one call's connections: address, port, result", func(p *Params) []Statement {
		return []Statement{{Name: "network", Shape: Table, SQL: fmt.Sprintf(`SELECT time, pid, comm, visitParamExtractString(detail, 'family') AS family,
    if(visitParamExtractString(detail, 'family') = 'unix', visitParamExtractString(detail, 'addr'), %s) AS address, port, result, errno
FROM %s
WHERE %s
ORDER BY time, seq
LIMIT %d`, addr("addr"), p.t("events"), and(p.callWhere(), "kind = 'connect'", "phase != 'setup'"), p.Limit)}}
	})

	register("call_denials", "one call's denials: layer, surface, rule, object", func(p *Params) []Statement {
		return []Statement{{Name: "denials", Shape: Table, SQL: fmt.Sprintf(`SELECT time, visitParamExtractString(detail, 'layer') AS layer, visitParamExtractString(detail, 'surface') AS surface,
    rule, path AS object, visitParamExtractBool(detail, 'audit') AS audit, pid, comm
FROM %s
WHERE %s
ORDER BY time, seq
LIMIT %d`, p.t("events"), and(p.callWhere(), "kind = 'denial'"), p.Limit)}}
	})
}

// kindIs filters a timeline by event kind (GroupBy names it), when asked.
func (p *Params) kindIs() string {
	if p.GroupBy == "" {
		return ""
	}
	return "kind = " + Quote(p.GroupBy)
}
