package dnsguard

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// dnsMsg is a message in wire form, for seeds.
func dnsMsg(t testing.TB, m layers.DNS) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := m.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func seedMessages(f *testing.F) [][]byte {
	a := func(name, ip string, ttl uint32) layers.DNSResourceRecord {
		addr := netip.MustParseAddr(ip)
		typ := layers.DNSTypeA
		if addr.Is6() {
			typ = layers.DNSTypeAAAA
		}
		return layers.DNSResourceRecord{Name: []byte(name), Type: typ, Class: layers.DNSClassIN, TTL: ttl, IP: net.IP(addr.AsSlice())}
	}
	cname := func(from, to string) layers.DNSResourceRecord {
		return layers.DNSResourceRecord{Name: []byte(from), Type: layers.DNSTypeCNAME, Class: layers.DNSClassIN, TTL: 60, CNAME: []byte(to)}
	}
	q := []layers.DNSQuestion{{Name: []byte("www.example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}
	opt := layers.DNSResourceRecord{Name: []byte(""), Type: layers.DNSTypeOPT, Class: layers.DNSClass(1232)}
	query := dnsMsg(f, layers.DNS{ID: 7, RD: true, Questions: q, Additionals: []layers.DNSResourceRecord{opt}})
	answer := dnsMsg(f, layers.DNS{ID: 7, QR: true, RD: true, RA: true, Questions: q,
		Answers: []layers.DNSResourceRecord{cname("www.example.com", "edge.example.net"), a("edge.example.net", "10.1.2.3", 30),
			a("edge.example.net", "198.51.100.7", 20), a("edge.example.net", "::ffff:127.0.0.1", 10)},
		Authorities: []layers.DNSResourceRecord{{Name: []byte("example.net"), Type: layers.DNSTypeSOA, Class: layers.DNSClassIN, TTL: 300,
			SOA: layers.DNSSOA{MName: []byte("ns.example.net"), RName: []byte("h.example.net"), Serial: 1}}},
		Additionals: []layers.DNSResourceRecord{opt, a("ns.example.net", "192.168.0.53", 5)}})
	loop := dnsMsg(f, layers.DNS{ID: 1, QR: true, Questions: q,
		Answers: []layers.DNSResourceRecord{cname("www.example.com", "a.example.com"), cname("a.example.com", "www.example.com")}})
	// a compression pointer to itself, and one past the end
	selfPtr := append(append([]byte(nil), query[:12]...), 0xc0, 12, 0, 1, 0, 1)
	pastEnd := append(append([]byte(nil), query[:12]...), 0xc0, 0xff, 0, 1, 0, 1)
	counts := append([]byte(nil), answer...)
	counts[6], counts[7] = 0xff, 0xff // ANCOUNT far past the records there are
	// an RRSIG gopacket cannot write, in the additional section
	rrsig := append(append([]byte(nil), answer...), 0, 0, 46, 0, 1, 0, 0, 0, 30, 0, 4, 1, 2, 3, 4)
	rrsig[11]++
	return [][]byte{query, answer, loop, selfPtr, pastEnd, counts, rrsig, {}, make([]byte, 12), answer[:len(answer)-3]}
}

// FuzzQuery: a query as the tool sends it to the call's resolver. Its decoding (decode, as
// answer() reads it) never panics (gopacket's does: testdata/fuzz/FuzzQuery); what it takes
// for one question, written plainly (plainQuestion: else it is refused unasked), has a name
// judged as the domain rules see it, and the refusal it is sent back (reply) is DNS: a
// response to that id and question with the refusal's code.
func FuzzQuery(f *testing.F) {
	for _, m := range seedMessages(f) {
		f.Add(m)
	}
	pol := &policy.NetPolicy{}
	f.Fuzz(func(t *testing.T, q []byte) {
		var msg layers.DNS
		if err := decode(&msg, q); err != nil || msg.QR || len(msg.Questions) != 1 {
			return
		}
		name := policy.CanonicalName(string(msg.Questions[0].Name))
		_ = pol.MatchDomains(name)
		_ = typeName(msg.Questions[0].Type)
		if l := udpLimit(&msg, "udp"); l < 512 || l > 65535 {
			t.Fatalf("udp limit %d", l)
		}
		if !plainQuestion(q, &msg) {
			return // answer() refuses it unasked, with no reply: the name judged is not the one asked
		}
		out := reply(&msg, layers.DNSResponseCodeRefused)
		if out == nil {
			t.Fatalf("no refusal for the plain question %q", msg.Questions[0].Name)
		}
		var r layers.DNS
		if err := decode(&r, out); err != nil {
			t.Fatalf("the refusal does not decode: %v", err)
		}
		if !r.QR || r.ID != msg.ID || r.ResponseCode != layers.DNSResponseCodeRefused || len(r.Questions) != 1 ||
			policy.CanonicalName(string(r.Questions[0].Name)) != name || r.Questions[0].Type != msg.Questions[0].Type ||
			len(r.Answers)+len(r.Authorities)+len(r.Additionals) != 0 {
			t.Fatalf("the refusal of %q (id %d) reads as %+v", name, msg.ID, r)
		}
	})
}

// FuzzAnswer: an upstream's answer, which whoever serves an allowed domain writes. Its chain
// ends in addresses of the name's chain only, no longer than maxChain, with a TTL no larger
// than theirs; the internal addresses are withheld; the answer rebuilt without them decodes
// as DNS, holds none of them in any section, keeps every other address (or is truncated, for
// the tool to ask over TCP), and fits the sender's UDP limit.
func FuzzAnswer(f *testing.F) {
	for _, m := range seedMessages(f) {
		f.Add(m, uint16(0))
		f.Add(m, uint16(512))
	}
	f.Fuzz(func(t *testing.T, resp []byte, limit uint16) {
		var ans layers.DNS
		if err := decode(&ans, resp); err != nil {
			return
		}
		name := "www.example.com"
		if len(ans.Questions) > 0 {
			name = policy.CanonicalName(string(ans.Questions[0].Name))
		}
		addrs, cnames, ttl := chain(name, ans.Answers)
		if len(cnames) > maxChain+1 {
			t.Fatalf("chain of %d names", len(cnames))
		}
		for _, a := range addrs {
			if !a.addr.IsValid() || a.addr.Is4In6() || ttl > a.ttl {
				t.Fatalf("address %v ttl %d, the chain's ttl %d", a.addr, a.ttl, ttl)
			}
		}
		c := &Call{}
		var ev event.DNS
		withheld, _ := c.withheld(&ans, nil, &ev)
		for a := range withheld {
			if policy.PrivateRange(a) == "" {
				t.Fatalf("public %v withheld", a)
			}
		}
		lim := int(limit)
		if lim != 0 && lim < 512 {
			lim = 512
		}
		out, err := rebuild(&ans, withheld, lim)
		if err != nil {
			return // answer() sends SERVFAIL
		}
		var got layers.DNS
		if err := decode(&got, out); err != nil {
			t.Fatalf("the rebuilt answer does not decode: %v", err)
		}
		if lim != 0 && len(out) > lim && len(got.Answers)+len(got.Authorities)+len(got.Additionals) > 0 {
			t.Fatalf("rebuilt answer of %d bytes past the limit %d, not truncated", len(out), lim)
		}
		if got.ID != ans.ID || got.ResponseCode != ans.ResponseCode {
			t.Fatalf("rebuilt answer id %d rcode %v, the upstream's %d %v", got.ID, got.ResponseCode, ans.ID, ans.ResponseCode)
		}
		kept := map[netip.Addr]bool{}
		for _, sec := range [][]layers.DNSResourceRecord{got.Answers, got.Authorities, got.Additionals} {
			for _, rr := range sec {
				if a, ok := rrAddr(&rr); ok {
					if withheld[a] {
						t.Fatalf("withheld %v in the rebuilt answer", a)
					}
					kept[a] = true
				}
			}
		}
		if got.TC && !ans.TC {
			return // truncated for the limit: the tool asks again over TCP
		}
		for _, sec := range [][]layers.DNSResourceRecord{ans.Answers, ans.Authorities, ans.Additionals} {
			for _, rr := range sec {
				if a, ok := rrAddr(&rr); ok && !withheld[a] && !kept[a] {
					t.Fatalf("address %v of the upstream's answer lost in the rebuilt one", a)
				}
			}
		}
	})
}
