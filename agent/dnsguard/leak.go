package dnsguard

import (
	"fmt"
	"strings"

	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/secrets"
)

// NameScanner finds chunks of live secrets in a DNS name (*secrets.Registry.InName): the
// name with them redacted, and what was found.
type NameScanner interface {
	InName(name string) (string, []secrets.Hit)
}

// maxAlertKeys bounds the finds a call's resolver remembers to raise each alert once.
const maxAlertKeys = 256

// secretIn says whether ev's name carries a chunk of a live secret (secrets.Registry.InName:
// raw, reversed, hex, base32, base64, cut over labels, any case). Such a query is never sent
// upstream, whatever the policy says, in audit mode too: the name itself is what leaves. The
// event's name is redacted, its verdict is refused, and each find is a credential event and
// an alert, once per call, secret and encoding (a tunnel sends many).
func (c *Call) secretIn(ev *event.DNS) bool {
	if c.cfg.Secrets == nil {
		return false
	}
	name, hits := c.cfg.Secrets.InName(ev.Name)
	if hits == nil {
		return false
	}
	ev.Name, ev.Verdict, ev.Rule = name, event.DNSRefused, ""
	ev.Rcode = rcodeName(layers.DNSResponseCodeRefused)
	var names []string
	for _, h := range hits {
		names = append(names, h.Name+" ("+h.Encoding+")")
	}
	ev.Detail = "refused: the name carries the live credential " + strings.Join(names, ", ") + "; never sent upstream"
	c.r.m.leaks.Inc()
	for _, h := range hits {
		if !c.once("leak/" + h.CallKey + "/" + h.Name + "/" + h.Encoding) {
			continue
		}
		cr := &event.Credential{Name: h.Name, Action: event.CredentialLeaked, Fingerprint: h.Fingerprint, Result: "refused", Where: "dns name", Encoding: h.Encoding}
		al := &event.Alert{RuleID: "credential-dns-exfiltration", Title: "A credential sent out in a DNS name", Severity: "critical",
			Surface: event.SurfaceCredential,
			Output: fmt.Sprintf("credential %s (fingerprint %s, %s) in a %s query for %s: refused, never sent upstream",
				h.Name, h.Fingerprint, h.Encoding, ev.Type, name)}
		if c.cfg.CallKey != "" && h.CallKey != c.cfg.CallKey {
			cr.OtherCall, cr.OtherTenant = h.CallKey, h.Tenant
			al.RuleID, al.Title = "credential-cross-call", "A credential of another call showed in this call"
			al.Output = fmt.Sprintf("credential %s (fingerprint %s) of call %s (id %s, tenant %s) showed in this call's dns name (%s), call %s: refused, never sent upstream",
				h.Name, h.Fingerprint, h.CallKey, h.CallID, h.Tenant, h.Encoding, c.cfg.CallKey)
		}
		c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: cr})
		c.cfg.Emit(event.Event{Kind: event.KindAlert, Alert: al})
	}
	return true
}

// once says whether key is seen for the first time in this call (past maxAlertKeys keys,
// every key is new again: a flood of distinct finds keeps alerting rather than going quiet).
func (c *Call) once(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alerted[key] {
		return false
	}
	if c.alerted == nil || len(c.alerted) >= maxAlertKeys {
		c.alerted = map[string]bool{}
	}
	c.alerted[key] = true
	return true
}

// Label runs: a tunnel under an allowed wildcard (*.example.com lets the tool choose every label
// below example.com) cuts its payload into labels short enough for no rule on one label to
// see. The labels the wildcard lets the tool choose are read as one run.
const (
	minRun         = 24  // letters and digits in the run
	minRunEntropy  = 3.4 // bits per character: encoded data, not words
	minRunSwitches = 0.2 // changes between letter and digit per character: words and host names rarely switch
)

// tunnelRun checks an allowed name for a high-entropy run of labels under a wildcard rule
// and raises the dns-tunnel-label-run alert, once per call and wildcard.
func (c *Call) tunnelRun(ev *event.DNS, rules []policy.DomainRule) {
	for _, r := range rules {
		base, ok := strings.CutPrefix(r.Pattern, "*.")
		if !ok {
			continue
		}
		sub, ok := strings.CutSuffix(ev.Name, "."+base)
		if !ok {
			continue
		}
		run := encodedRun(sub)
		if run == "" {
			continue
		}
		c.r.m.tunnels.Inc()
		if !c.once("tunnel/" + r.Pattern) {
			return
		}
		c.cfg.Emit(event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "dns-tunnel-label-run", Title: "Encoded data in the labels under an allowed wildcard",
			Severity: "high", Surface: event.SurfacePolicy, Technique: []string{"T1071.004", "T1048"},
			Output: fmt.Sprintf("%s query for %s (%s): the labels under %s read as %d characters of encoded data (%.2f bits each); the first of the call under this wildcard",
				ev.Type, ev.Name, ev.Verdict, r.Pattern, len(run), secrets.Entropy(run))}})
		return
	}
}

// encodedRun is the letters and digits of sub (the labels under a wildcard) when they look
// like encoded data, or "".
func encodedRun(sub string) string {
	var b strings.Builder
	for i := 0; i < len(sub); i++ {
		if c := sub[i]; c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		}
	}
	run := b.String()
	if len(run) < minRun {
		return ""
	}
	// Hex is 16 symbols: hex of text (a secret's ASCII) scores well below random data and
	// has few letters; it is told by its alphabet, letters and digits both.
	if strings.Trim(run, "0123456789abcdef") == "" && strings.ContainsAny(run, "abcdef") && strings.ContainsAny(run, "0123456789") {
		return run
	}
	if secrets.Entropy(run) < minRunEntropy {
		return ""
	}
	switches := 0
	for i := 1; i < len(run); i++ {
		if isDigit(run[i]) != isDigit(run[i-1]) {
			switches++
		}
	}
	if float64(switches)/float64(len(run)) < minRunSwitches {
		return ""
	}
	return run
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
