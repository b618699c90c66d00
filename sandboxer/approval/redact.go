package approval

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/secrets"
)

// redactAlert is the rule of the alert raised when an object matched a policy's pattern.
const redactAlert = "approval-object-redact"

// redact is object with every match of the policy's output patterns (spec.output.redact)
// replaced by its marker: what a request and the call's events show of a name the tool chose.
// The live brokered secrets are the broker's (publish.go) and the agent's to take out; these
// are the policy's own, which only this call knows. The first match of each pattern in the
// call raises an alert (a name the tool made to carry something out of a call, or to put it
// in front of a person, a webhook and a log).
func (s *Supervisor) redact(o *op, object string) string {
	out, names := secrets.ScrubPatterns(object, s.cfg.Redact)
	if names == nil {
		return object
	}
	var fresh []string
	s.redactMu.Lock()
	if s.redactSeen == nil {
		s.redactSeen = map[string]bool{}
	}
	for _, n := range names {
		if !s.redactSeen[n] {
			s.redactSeen[n] = true
			fresh = append(fresh, n)
		}
	}
	s.redactMu.Unlock()
	for _, n := range fresh {
		s.emitEvent(o, event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: redactAlert,
			Title: "The object of an approval request matched a redaction pattern", Severity: "medium", Surface: event.SurfaceApproval,
			Output: fmt.Sprintf("pattern %s matched in the object of a held %s (%s): redacted in the request, its events and its log lines", n, o.name, o.action)}})
	}
	return out
}
