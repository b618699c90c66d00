package query

import "fmt"

// ApprovalRefusals are the outcomes of an approval request whose action did not happen
// because of the decision: a person's deny, no answer in time, a repeat of a denied action.
var ApprovalRefusals = []string{"denied", "timeout", "repeat"}

func init() {
	register("approvals", "approval requests and decisions (one call with call): action, object, rule, outcome, by, channel, latency", func(p *Params) []Statement {
		w := p.eventsOf("approval")
		return []Statement{{Name: "approvals", Shape: Table, Args: w.args, SQL: fmt.Sprintf(`SELECT time, approval_outcome AS outcome, approval_action AS action, path AS object, rule,
    approval_by AS by, approval_channel AS channel, round(approval_latency_ns / 1e6, 1) AS latency_ms,
    syscall, result, approval_id, tenant, tool, call_id, call_key
FROM %s
WHERE %s
ORDER BY time DESC, call_key, seq
LIMIT %d`, p.t("events"), w, p.Limit)}}
	})

	register("approval_refusals", "approval requests refused per step (denied, timeout, repeat), a series per outcome", func(p *Params) []Statement {
		w := p.eventsOf("approval").add("has(?, approval_outcome)", ApprovalRefusals)
		return []Statement{{Name: "approval_refusals", Shape: Series, Args: w.args, SQL: fmt.Sprintf(`SELECT %s AS time, approval_outcome AS outcome, count() AS refusals
FROM %s
WHERE %s
GROUP BY time, outcome
ORDER BY time, outcome`, p.bucket("time"), p.t("events"), w)}}
	})
}
