package dnsguard

import (
	"fmt"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/testenv/dnstest"
)

// The addresses pinned for a name are those at the end of its CNAME chain, and only those.
func TestChain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rrs   []layers.DNSResourceRecord
		want  string
		chain string
		ttl   uint32
	}{
		{"direct", []layers.DNSResourceRecord{dnstest.A("a.test", "192.0.2.1", 30), dnstest.A("a.test", "2001:db8::1", 20)},
			"[192.0.2.1 2001:db8::1]", "[]", 20},
		{"chain, smallest TTL on the way", []layers.DNSResourceRecord{dnstest.CNAME("a.test", "b.test", 10), dnstest.CNAME("b.test", "c.test", 300), dnstest.A("c.test", "192.0.2.3", 60)},
			"[192.0.2.3]", "[b.test c.test]", 10},
		{"case and root dot", []layers.DNSResourceRecord{dnstest.CNAME("A.Test.", "B.test.", 50), dnstest.A("b.TEST", "192.0.2.4", 60)},
			"[192.0.2.4]", "[b.test]", 50},
		{"another owner's address is not the answer", []layers.DNSResourceRecord{dnstest.A("a.test", "192.0.2.1", 30), dnstest.A("evil.test", "192.0.2.66", 30)},
			"[192.0.2.1]", "[]", 30},
		{"an address beside a CNAME of the same owner", []layers.DNSResourceRecord{dnstest.CNAME("a.test", "b.test", 30), dnstest.A("b.test", "192.0.2.2", 30), dnstest.A("x.test", "192.0.2.9", 30)},
			"[192.0.2.2]", "[b.test]", 30},
		{"loop", []layers.DNSResourceRecord{dnstest.CNAME("a.test", "b.test", 30), dnstest.CNAME("b.test", "a.test", 30)},
			"[]", "[b.test a.test]", 30},
		{"dangling", []layers.DNSResourceRecord{dnstest.CNAME("a.test", "b.test", 30)}, "[]", "[b.test]", 30},
		{"nothing", nil, "[]", "[]", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, cnames, ttl := chain("a.test", tc.rrs)
			var got []string
			for _, a := range addrs {
				got = append(got, a.addr.String())
			}
			if fmt.Sprint(got) != tc.want && !(len(got) == 0 && tc.want == "[]") || fmt.Sprint(cnames) != tc.chain || ttl != tc.ttl {
				t.Errorf("got %v %v ttl %d, want %s %s ttl %d", got, cnames, ttl, tc.want, tc.chain, tc.ttl)
			}
		})
	}
}
