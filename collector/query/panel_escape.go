package query

import "fmt"

// EscapeSyscalls are the syscalls a tool breaking out of its sandbox reaches for: other
// processes' memory, mounts and namespaces, the kernel's own interfaces, keys.
var EscapeSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
	"unshare", "setns", "bpf", "perf_event_open", "init_module", "finit_module", "delete_module",
	"kexec_load", "kexec_file_load", "keyctl", "add_key", "request_key", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at", "move_mount", "open_tree", "fsopen", "fsmount",
	"fsconfig", "mount_setattr", "personality", "iopl", "ioperm", "memfd_create", "io_uring_setup",
}

func (p *Params) alertsWhere() string {
	return and(p.between("time"), p.scope(""), p.surfaceIs("surface"))
}

func init() {
	register("alerts_over_time", "alerts per step, a series per rule, severity or surface (group by)", func(p *Params) []Statement {
		col := "rule_id"
		switch p.GroupBy {
		case "severity", "surface":
			col = p.GroupBy
		}
		return []Statement{{Name: "alerts", Shape: Series, SQL: fmt.Sprintf(`SELECT %s AS time, %s AS %s, count() AS alerts
FROM %s
WHERE %s
GROUP BY time, %s
ORDER BY time, %s`, p.bucket("time"), col, labelName(col), p.t("alerts"), p.alertsWhere(), labelName(col), labelName(col))}}
	})

	register("top_rules", "rules by alerts in the range, with the calls and tools they fired on", func(p *Params) []Statement {
		return []Statement{{Name: "top_rules", Shape: Table, SQL: fmt.Sprintf(`SELECT rule_id AS rule, any(title) AS title, any(severity) AS severity, any(surface) AS surface,
    count() AS alerts, uniqExact(call_key) AS calls, uniqExact(tool) AS tools
FROM %s
WHERE %s
GROUP BY rule
ORDER BY alerts DESC, rule
LIMIT %d`, p.t("alerts"), p.alertsWhere(), p.Limit)}}
	})

	register("alerts", "alerts in the range, newest first, with the call they belong to", func(p *Params) []Statement {
		w := p.alertsWhere()
		if p.Call != "" {
			w = and(w, p.callIs())
		}
		if p.Text != "" {
			w = and(w, "positionCaseInsensitive(concat(rule_id, ' ', title, ' ', output, ' ', call_id), "+Quote(p.Text)+") > 0")
		}
		return []Statement{{Name: "alerts", Shape: Table, SQL: fmt.Sprintf(`SELECT time, severity, rule_id AS rule, title, surface, tenant, tool, call_id, call_key, output
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, p.t("alerts"), w, p.Limit)}}
	})

	register("first_seen", "per tool, the binaries it ran for the first time in the range (first ever seen there)", func(p *Params) []Statement {
		return []Statement{{Name: "first_seen", Shape: Table, SQL: fmt.Sprintf(`SELECT tool, path AS binary, first_seen, last_seen, calls, execs FROM (
    SELECT tool, path, min(time) AS first_seen, max(time) AS last_seen, uniqExact(call_key) AS calls, count() AS execs
    FROM %s
    WHERE %s
    GROUP BY tool, path
)
WHERE %s
ORDER BY first_seen DESC, tool, binary
LIMIT %d`, p.t("events"), and("kind = 'exec'", "phase != 'setup'", "time <= toDateTime("+fmt.Sprint(p.To.Unix())+")", p.scope("")), p.between("first_seen"), p.Limit)}}
	})

	register("escape_syscalls", "per tool, the escape-related syscalls its calls made (ptrace, mount, unshare, bpf, ...)", func(p *Params) []Statement {
		return []Statement{{Name: "escape_syscalls", Shape: Table, SQL: fmt.Sprintf(`SELECT tool, syscall, count() AS events, countIf(result < 0) AS failed, uniqExact(call_key) AS calls
FROM %s
WHERE %s
GROUP BY tool, syscall
ORDER BY events DESC, tool, syscall
LIMIT %d`, p.t("events"), and(p.between("time"), p.scope(""), "kind = 'syscall'", "phase != 'setup'", in("syscall", EscapeSyscalls)), p.Limit)}}
	})

	register("egress_denials", "connections refused by the egress policy (cgroup socket hooks), newest first", func(p *Params) []Statement {
		return []Statement{{Name: "egress_denials", Shape: Table, SQL: fmt.Sprintf(`SELECT time, tenant, tool, call_id, call_key, path AS destination, rule,
    visitParamExtractString(detail, 'layer') AS layer, comm, exe
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, p.t("events"), and(p.between("time"), p.scope(""), "kind = 'denial'", "visitParamExtractString(detail, 'layer') = 'bpf-cgroup-sock'"), p.Limit)}}
	})
}

func labelName(col string) string {
	if col == "rule_id" {
		return "rule"
	}
	return col
}
