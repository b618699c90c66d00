package agent

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/secrets"
)

// Secrets is the node's registry of live brokered secrets (every call's, while it runs) and
// its fingerprint key: the launcher registers what it delivers, the agent scrubs the trail.
func (a *Agent) Secrets() *secrets.Registry { return a.secrets }

// scrub takes every live secret, and every match of the call's redaction patterns
// (CallOptions.Redact), out of the event's strings before it is recorded: a tool that passes a
// credential in an argument or a path would otherwise put it in the journal and ClickHouse. It costs one atomic load while no call holds a secret; otherwise a substring
// search per form of each live secret on the few strings an event carries, in the call's own
// stage (never the ring reader's), bounded by the kernel's string sizes. It returns the
// credential events and alerts the finds make: a secret of another call is an alert naming
// both calls.
func (a *Agent) scrub(c *Call, ev *event.Event) []event.Event {
	var hits []secrets.Hit
	var where string
	if ev.Exec != nil {
		// taken whether or not a secret is live: the exec records its environment's size
		if hits = a.scanEnv(c, ev); hits != nil {
			where = "exec env"
		}
	}
	live := a.secrets.Live()
	if ev.Alert != nil {
		// An alert's output quotes what the tool did (an approval retry names the object):
		// scrubbed too, without a leak of its own (the event it quotes had it).
		if live {
			ev.Alert.Output, _ = a.secrets.Scrub(ev.Alert.Output)
		}
		ev.Alert.Output, _ = secrets.ScrubPatterns(ev.Alert.Output, c.redact)
	}
	if !live && len(c.redact) == 0 || ev.Kind == event.KindCredential || ev.Kind == event.KindAlert {
		return a.leakEvents(c, hits, where, ev)
	}
	// Live secrets first (a find is a credential event), then the policy's own patterns
	// (spec.output.redact): a name the tool chose holds what the caller never sees in its
	// output, and the trail (the journal, ClickHouse, the timeline) does not show it either.
	s := func(w string, p *string) {
		if live {
			out, h := a.secrets.Scrub(*p)
			if h != nil {
				*p, hits, where = out, append(hits, h...), w
			}
		}
		*p, _ = secrets.ScrubPatterns(*p, c.redact)
	}
	s("process name", &ev.Comm)
	s("path", &ev.Exe)
	s("path", &ev.ParentExe)
	switch {
	case ev.Exec != nil:
		s("exec filename", &ev.Exec.Filename)
		s("exec filename", &ev.Exec.ExeName)
		for i := range ev.Exec.Argv {
			s("exec argv", &ev.Exec.Argv[i])
		}
	case ev.Open != nil:
		s("path", &ev.Open.Path)
		s("path", &ev.Open.ResolvedPath)
	case ev.Syscall != nil:
		s("path", &ev.Syscall.Path)
		s("path", &ev.Syscall.Path2)
		s("path", &ev.Syscall.ToolPath)
		s("path", &ev.Syscall.ToolPath2)
	case ev.Connect != nil:
		s("address", &ev.Connect.Addr)
	case ev.Denial != nil:
		s("path", &ev.Denial.Object)
	case ev.Aggregate != nil:
		s("path", &ev.Aggregate.Object)
	case ev.Approval != nil:
		// The object of an approval request is a name the tool chose; the broker denies a
		// request whose object holds a live secret (sandboxer/approval).
		s(whereApproval, &ev.Approval.Object)
		s("approval reason", &ev.Approval.Reason)
	case ev.DNS != nil:
		// A secret sent out as labels of a name (a DNS exfiltration), in any of its forms.
		s("dns name", &ev.DNS.Name)
		for i := range ev.DNS.CNAMEs {
			s("dns name", &ev.DNS.CNAMEs[i])
		}
	}
	return a.leakEvents(c, hits, where, ev)
}

// scrubStart takes live secrets out of the call's command line before its start is journalled.
func (a *Agent) scrubStart(c *Call) []event.Event {
	if !a.secrets.Live() {
		return nil
	}
	var hits []secrets.Hit
	argv := append([]string(nil), c.Start.Argv...)
	for i := range argv {
		out, h := a.secrets.Scrub(argv[i])
		argv[i], hits = out, append(hits, h...)
	}
	c.Start.Argv = argv
	return a.leakEvents(c, hits, "call argv", &event.Event{})
}

// leakEvents are the credential events, and for another call's secret the alert naming both
// calls, of secrets found where ev shows.
func (a *Agent) leakEvents(c *Call, hits []secrets.Hit, where string, ev *event.Event) []event.Event {
	var out []event.Event
	for _, h := range hits {
		a.m.credentialLeaks.Inc()
		// A tool repeating a leak (a loop opening a path named after the secret) is scrubbed
		// every time but recorded once per credential, call and place: alerts are never
		// aggregated, and a flood of them would be the tool's to make.
		key := h.CallKey + "/" + h.Name + "/" + where + "/" + h.Encoding
		if c.leaksSeen == nil {
			c.leaksSeen = map[string]bool{}
		}
		if c.leaksSeen[key] {
			continue
		}
		c.leaksSeen[key] = true
		cr := &event.Credential{Name: h.Name, Action: event.CredentialLeaked, Fingerprint: h.Fingerprint, Result: "redacted", Where: where, Encoding: h.Encoding}
		if h.CallKey != c.Start.CallKey {
			cr.OtherCall, cr.OtherTenant = h.CallKey, h.Tenant
			out = append(out, event.Event{Time: ev.Time, Kind: event.KindCredential, PID: ev.PID, TID: ev.TID, Credential: cr},
				event.Event{Time: ev.Time, Kind: event.KindAlert, PID: ev.PID, TID: ev.TID, Alert: &event.Alert{
					RuleID: "credential-cross-call", Title: "A credential of another call showed in this call", Severity: "critical",
					Surface: event.SurfaceCredential,
					Output: fmt.Sprintf("credential %s (fingerprint %s) of call %s (id %s, tenant %s) showed in this call's %s (%s), call %s (tenant %s)",
						h.Name, h.Fingerprint, h.CallKey, h.CallID, h.Tenant, where, h.Encoding, c.Start.CallKey, c.Start.Tenant),
				}})
			continue
		}
		out = append(out, event.Event{Time: ev.Time, Kind: event.KindCredential, PID: ev.PID, TID: ev.TID, Credential: cr})
		if where == whereApproval {
			out = append(out, event.Event{Time: ev.Time, Kind: event.KindAlert, PID: ev.PID, TID: ev.TID, Alert: &event.Alert{
				RuleID: "credential-approval-object", Title: "A credential in the object of an approval request", Severity: "critical",
				Surface: event.SurfaceCredential,
				Output: fmt.Sprintf("credential %s (fingerprint %s, %s) in the object of an approval request of call %s: the request was denied without asking anyone, and its object is redacted everywhere it goes",
					h.Name, h.Fingerprint, h.Encoding, c.Start.CallKey),
			}})
		}
	}
	return out
}

// whereApproval is where a secret in an approval request's object is found.
const whereApproval = "approval object"
