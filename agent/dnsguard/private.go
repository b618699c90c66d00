package dnsguard

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// withheld are the answer's internal addresses (policy.PrivateRange) that none of the name's
// rules allows (allowPrivate): a public name answered with 127.0.0.1 or 10.x (DNS rebinding)
// must not open a way to what trusts the host's own networks. They leave the reply and are
// never pinned; note says which, for the call's dns event. In audit mode nothing is
// withheld, and note says what would have been.
func (c *Call) withheld(ans *layers.DNS, rules []policy.DomainRule, ev *event.DNS) (map[netip.Addr]bool, string) {
	for _, r := range rules {
		if r.AllowPrivate {
			return nil, ""
		}
	}
	var out map[netip.Addr]bool
	var named []string
	for _, sec := range [][]layers.DNSResourceRecord{ans.Answers, ans.Additionals} {
		for _, rr := range sec {
			a, ok := rrAddr(&rr)
			if !ok {
				continue
			}
			kind := policy.PrivateRange(a)
			if kind == "" || out[a] {
				continue
			}
			if out == nil {
				out = map[netip.Addr]bool{}
			}
			out[a] = true
			named = append(named, fmt.Sprintf("%s (%s)", a, kind))
			ev.Internal = append(ev.Internal, a.String())
		}
	}
	if len(out) == 0 {
		return nil, ""
	}
	if c.cfg.Audit {
		return nil, "audit: would withhold " + strings.Join(named, ", ") + ": internal addresses, and no rule for the name says allowPrivate"
	}
	return out, "withheld " + strings.Join(named, ", ") + ": internal addresses, and no rule for the name says allowPrivate"
}

func rrAddr(rr *layers.DNSResourceRecord) (netip.Addr, bool) {
	if rr.Class != layers.DNSClassIN || rr.Type != layers.DNSTypeA && rr.Type != layers.DNSTypeAAAA {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(rr.IP)
	return a.Unmap(), ok
}

// udpLimit is the largest UDP reply the query's sender takes: 512 bytes, or what its EDNS
// record says; 0 over TCP (no limit but the length prefix's).
func udpLimit(q *layers.DNS, transport string) int {
	if transport != "udp" {
		return 0
	}
	for _, rr := range q.Additionals {
		if rr.Type == layers.DNSTypeOPT && int(rr.Class) > 512 {
			return int(rr.Class)
		}
	}
	return 512
}

// rebuild is the upstream's answer without the withheld addresses' records. Records gopacket
// cannot write (DNSSEC signatures, SVCB, ...) go too: they carry no address, and the
// signatures no longer sign what is left. Written without name compression, it can outgrow
// what the upstream sent: past limit (0: none) it goes truncated, its records left out, and
// the tool asks again over TCP, as it would of any server.
func rebuild(ans *layers.DNS, withheld map[netip.Addr]bool, limit int) ([]byte, error) {
	keep := func(rrs []layers.DNSResourceRecord) []layers.DNSResourceRecord {
		var out []layers.DNSResourceRecord
		for _, rr := range rrs {
			if a, ok := rrAddr(&rr); ok && withheld[a] {
				continue
			}
			switch rr.Type {
			case layers.DNSTypeA, layers.DNSTypeAAAA, layers.DNSTypeNS, layers.DNSTypeCNAME, layers.DNSTypePTR,
				layers.DNSTypeSOA, layers.DNSTypeMX, layers.DNSTypeTXT, layers.DNSTypeSRV, layers.DNSTypeURI, layers.DNSTypeOPT:
				out = append(out, rr)
			}
		}
		return out
	}
	r := *ans
	r.Answers, r.Authorities, r.Additionals = keep(ans.Answers), keep(ans.Authorities), keep(ans.Additionals)
	buf := gopacket.NewSerializeBuffer()
	if err := r.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil, err
	}
	if limit == 0 || len(buf.Bytes()) <= limit {
		return readsBack(buf.Bytes(), &r)
	}
	r.TC, r.Answers, r.Authorities, r.Additionals = true, nil, nil, nil
	buf = gopacket.NewSerializeBuffer()
	if err := r.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil, err
	}
	return readsBack(buf.Bytes(), &r)
}
