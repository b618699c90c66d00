package query

import "fmt"

// dnsColumns are a dns event's fields; answers and transport are only in its detail JSON.
const dnsColumns = `path AS name, dns_type AS type, replaceRegexpAll(visitParamExtractRaw(detail, 'answers'), '[\\[\\]"]', '') AS answers,
    errno AS rcode, dns_verdict AS verdict, rule, visitParamExtractString(detail, 'transport') AS transport`

func init() {
	register("dns", "DNS queries to berm's resolver (one call with call): name, type, answers, rcode, verdict; text filters the name", func(p *Params) []Statement {
		w := p.eventsOf("dns")
		if p.Text != "" {
			w.add("positionCaseInsensitive(path, ?) > 0", p.Text)
		}
		return []Statement{{Name: "dns", Shape: Table, Args: w.args, SQL: fmt.Sprintf(`SELECT time, %s,
    tenant, tool, call_id, call_key, comm, exe
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, dnsColumns, p.t("events"), w, p.Limit)}}
	})

	register("dns_refusals", "DNS queries the resolver refused (and audit-mode would-be refusals), newest first", func(p *Params) []Statement {
		w := p.eventsOf("dns").add("dns_verdict != ?", "allowed")
		return []Statement{{Name: "dns_refusals", Shape: Table, Args: w.args, SQL: fmt.Sprintf(`SELECT time, %s,
    tenant, tool, call_id, call_key, exe
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, dnsColumns, p.t("events"), w, p.Limit)}}
	})

	register("dns_over_time", "DNS queries per step, a series per verdict (allowed, refused, audit-refused)", func(p *Params) []Statement {
		w := p.eventsOf("dns")
		return []Statement{{Name: "dns", Shape: Series, Args: w.args, SQL: fmt.Sprintf(`SELECT %s AS time, dns_verdict AS verdict, count() AS queries
FROM %s
WHERE %s
GROUP BY time, verdict
ORDER BY time, verdict`, p.bucket("time"), p.t("events"), w)}}
	})

	register("dns_alerts", "alerts of the DNS rules (tunnelling: long labels, high-entropy names, many subdomains; connects to unresolved addresses), newest first", func(p *Params) []Statement {
		b := &bound{}
		b.add(p.between("time")).add("rule_id LIKE ?", "dns-%")
		if len(p.Tenants) > 0 {
			b.add("has(?, tenant)", p.Tenants)
		}
		if len(p.Tools) > 0 {
			b.add("has(?, tool)", p.Tools)
		}
		return []Statement{{Name: "dns_alerts", Shape: Table, Args: b.args, SQL: fmt.Sprintf(`SELECT time, severity, rule_id AS rule, title, tenant, tool, call_id, call_key, output
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, p.t("alerts"), b, p.Limit)}}
	})
}
