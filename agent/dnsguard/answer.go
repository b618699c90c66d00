package dnsguard

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// maxChain bounds the CNAME links followed from the question's name.
const maxChain = 16

// answer handles one query and returns the reply to send (nil: none, the query was not DNS).
// Addresses are pinned before the reply leaves: the tool's connect right after its lookup
// finds them.
func (c *Call) answer(q []byte, transport string) []byte {
	var msg layers.DNS
	if err := decode(&msg, q); err != nil || msg.QR {
		c.emit(&event.DNS{Rcode: rcodeName(layers.DNSResponseCodeFormErr), Verdict: event.DNSRefused, Transport: transport, Detail: "not a DNS query"})
		return nil
	}
	if len(msg.Questions) != 1 {
		// one question per query, as every resolver sends: more would be names judged unseen
		c.emit(&event.DNS{Rcode: rcodeName(layers.DNSResponseCodeFormErr), Verdict: event.DNSRefused, Transport: transport,
			Detail: fmt.Sprintf("%d questions", len(msg.Questions))})
		return reply(&msg, layers.DNSResponseCodeFormErr)
	}
	qn := msg.Questions[0]
	ev := &event.DNS{Name: policy.CanonicalName(string(qn.Name)), Type: typeName(qn.Type), Transport: transport}
	if !plainQuestion(q, &msg) {
		// the name judged would not be the name asked (a label holding a dot, an empty one)
		ev.Rcode, ev.Verdict, ev.Detail = rcodeName(layers.DNSResponseCodeFormErr), event.DNSRefused, "question name not in plain form"
		c.emit(ev)
		return nil
	}
	if c.secretIn(ev) {
		c.emit(ev)
		return reply(&msg, layers.DNSResponseCodeRefused)
	}
	rules := c.policy.Load().MatchDomains(ev.Name)
	switch {
	case len(rules) > 0:
		ev.Verdict, ev.Rule = event.DNSAllowed, rules[0].Field
	case c.cfg.Audit:
		ev.Verdict = event.DNSAuditRefused
	default:
		ev.Verdict = event.DNSRefused
		ev.Rcode = rcodeName(layers.DNSResponseCodeRefused)
		c.emit(ev)
		return reply(&msg, layers.DNSResponseCodeRefused)
	}

	c.tunnelRun(ev, rules)
	fwd, err := forwardQuery(&msg, transport)
	if err != nil {
		ev.Rcode, ev.Detail = rcodeName(layers.DNSResponseCodeServFail), err.Error()
		c.emit(ev)
		return reply(&msg, layers.DNSResponseCodeServFail)
	}
	resp, err := c.r.exchange(c.upstream, fwd.msg, transport, fwd.id)
	if err != nil {
		c.r.m.upstream.Inc()
		ev.Rcode, ev.Detail = rcodeName(layers.DNSResponseCodeServFail), err.Error()
		c.emit(ev)
		return reply(&msg, layers.DNSResponseCodeServFail)
	}
	var ans layers.DNS
	if err := decode(&ans, resp); err != nil {
		ev.Rcode, ev.Detail = rcodeName(layers.DNSResponseCodeServFail), "upstream answer: "+err.Error()
		c.emit(ev)
		return reply(&msg, layers.DNSResponseCodeServFail)
	}
	ev.Rcode = rcodeName(ans.ResponseCode)
	addrs, cnames, ttl := chain(ev.Name, ans.Answers)
	ev.CNAMEs, ev.TTL = cnames, ttl
	withheld, note := c.withheld(&ans, rules, ev)
	if len(withheld) > 0 {
		if resp, err = rebuild(&ans, withheld, udpLimit(&msg, transport)); err != nil {
			ev.Rcode, ev.Detail = rcodeName(layers.DNSResponseCodeServFail), note+"; the reply without them: "+err.Error()
			c.emit(ev)
			return reply(&msg, layers.DNSResponseCodeServFail)
		}
	}
	ev.Detail = note
	now := time.Now()
	for _, a := range addrs {
		if withheld[a.addr] {
			continue
		}
		ev.Answers = append(ev.Answers, a.addr.String())
		c.resolved.add(a.addr)
		private := policy.PrivateRange(a.addr) != ""
		for i := range rules {
			if private && !rules[i].AllowPrivate && !c.cfg.Audit {
				continue // another of the name's rules allows it; this one's ports stay closed there
			}
			if err := c.pins.add(a.addr, &rules[i], now.Add(time.Duration(a.ttl)*time.Second)); err != nil {
				// unpinned, the address stays closed: the tool's connect fails, as it should
				ev.Detail = "pin: " + err.Error()
				c.r.m.pinErrs.Inc()
				c.r.log.Warn("dns pin failed", "call", c.cfg.Name, "addr", a.addr, "err", err)
			}
		}
	}
	c.emit(ev)
	return fwd.toTool(resp, q)
}

// overloaded answers a query past the call's in-flight bound with SERVFAIL, recorded.
func (c *Call) overloaded(q []byte, transport string) []byte {
	var msg layers.DNS
	if err := decode(&msg, q); err != nil || msg.QR || len(msg.Questions) != 1 {
		// recorded as answer records it: a flood of garbage is counted like any other
		c.emit(&event.DNS{Rcode: rcodeName(layers.DNSResponseCodeFormErr), Verdict: event.DNSRefused, Transport: transport, Detail: "not a DNS query, or not one question"})
		return nil
	}
	ev := &event.DNS{Name: policy.CanonicalName(string(msg.Questions[0].Name)), Type: typeName(msg.Questions[0].Type),
		Rcode: rcodeName(layers.DNSResponseCodeServFail), Verdict: event.DNSRefused, Transport: transport,
		Detail: fmt.Sprintf("not asked: more than %d queries of the call in flight", maxInflight)}
	rcode := layers.DNSResponseCodeServFail
	if c.secretIn(ev) {
		rcode = layers.DNSResponseCodeRefused
	} else {
		c.judgeOnly(ev)
	}
	c.emit(ev)
	return reply(&msg, rcode)
}

func (c *Call) emit(d *event.DNS) {
	c.r.m.queries.WithLabelValues(d.Verdict, d.Transport).Inc()
	c.cfg.Emit(event.Event{Kind: event.KindDNS, DNS: d})
}

type resolved struct {
	addr netip.Addr
	ttl  uint32 // the smallest TTL on the way to it
}

// chain follows the CNAMEs from name through the answer section and returns the addresses at
// its end (only those: an address record of another owner is not what was asked), the chain's
// names, and its smallest TTL.
func chain(name string, rrs []layers.DNSResourceRecord) ([]resolved, []string, uint32) {
	var addrs []resolved
	var cnames []string
	cur, minTTL, seen := name, ^uint32(0), map[string]bool{}
	for hop := 0; hop <= maxChain && !seen[cur]; hop++ {
		seen[cur] = true
		var next string
		for _, rr := range rrs {
			if policy.CanonicalName(string(rr.Name)) != cur || rr.Class != layers.DNSClassIN {
				continue
			}
			switch rr.Type {
			case layers.DNSTypeA, layers.DNSTypeAAAA:
				if a, ok := netip.AddrFromSlice(rr.IP); ok {
					addrs = append(addrs, resolved{a.Unmap(), min(rr.TTL, minTTL)})
				}
			case layers.DNSTypeCNAME:
				if next == "" {
					next = policy.CanonicalName(string(rr.CNAME))
					minTTL = min(minTTL, rr.TTL)
				}
			}
		}
		if len(addrs) > 0 || next == "" {
			break
		}
		cnames = append(cnames, next)
		cur = next
	}
	ttl := minTTL
	for _, a := range addrs {
		ttl = min(ttl, a.ttl)
	}
	if ttl == ^uint32(0) {
		ttl = 0
	}
	return addrs, cnames, ttl
}

// reply is the query turned into an answer with rcode and no records.
func reply(q *layers.DNS, rcode layers.DNSResponseCode) []byte {
	r := layers.DNS{ID: q.ID, QR: true, OpCode: q.OpCode, RD: q.RD, RA: true, ResponseCode: rcode, Questions: q.Questions, QDCount: uint16(len(q.Questions))}
	buf := gopacket.NewSerializeBuffer()
	if err := r.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil
	}
	b, _ := readsBack(buf.Bytes(), &r) // a question gopacket cannot write back: no reply
	return b
}

func typeName(t layers.DNSType) string {
	if s := t.String(); s != "Unknown" && s != "" {
		return s
	}
	return fmt.Sprintf("TYPE%d", uint16(t))
}

func rcodeName(r layers.DNSResponseCode) string {
	switch r {
	case layers.DNSResponseCodeNoErr:
		return "NOERROR"
	case layers.DNSResponseCodeFormErr:
		return "FORMERR"
	case layers.DNSResponseCodeServFail:
		return "SERVFAIL"
	case layers.DNSResponseCodeNXDomain:
		return "NXDOMAIN"
	case layers.DNSResponseCodeNotImp:
		return "NOTIMP"
	case layers.DNSResponseCodeRefused:
		return "REFUSED"
	}
	return fmt.Sprintf("RCODE%d", uint8(r))
}

// udpBufs are receive buffers for upstream answers (a UDP message can be 64 KiB): allocated
// per query, they cost more than the rest of the exchange.
var udpBufs = sync.Pool{New: func() any { b := make([]byte, 65535); return &b }}

// exchange asks the upstream, over the transport the tool used (a truncated UDP answer goes
// back as it is: the tool retries over TCP, which comes here too).
func (r *Resolver) exchange(upstream string, q []byte, transport string, id uint16) ([]byte, error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	conn, err := net.DialTimeout(transport, upstream, r.cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", upstream, err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if transport == "tcp" {
		if err := writeTCPMsg(conn, q); err != nil {
			return nil, fmt.Errorf("upstream %s: %w", upstream, err)
		}
		resp, err := readTCPMsg(conn)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", upstream, err)
		}
		return resp, nil
	}
	if _, err := conn.Write(q); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", upstream, err)
	}
	bp := udpBufs.Get().(*[]byte)
	defer udpBufs.Put(bp)
	buf := *bp
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", upstream, err)
		}
		// a connected socket takes datagrams from the upstream only; an id that is not the
		// query's is a stale or spoofed answer
		if n >= 12 && uint16(buf[0])<<8|uint16(buf[1]) == id && buf[2]&0x80 != 0 {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}
