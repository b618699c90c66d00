package dnsguard

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
)

// An upstream answer as a recursive resolver sends it (a CNAME, addresses, an SOA, EDNS, a
// signature): without the withheld address it keeps the rest, and decodes as DNS.
func TestRebuildWithoutWithheld(t *testing.T) {
	a := func(name, ip string) layers.DNSResourceRecord {
		addr := netip.MustParseAddr(ip)
		typ := layers.DNSTypeA
		if addr.Is6() {
			typ = layers.DNSTypeAAAA
		}
		return layers.DNSResourceRecord{Name: []byte(name), Type: typ, Class: layers.DNSClassIN, TTL: 30, IP: net.IP(addr.AsSlice())}
	}
	in := layers.DNS{ID: 7, QR: true, RD: true, RA: true,
		Questions: []layers.DNSQuestion{{Name: []byte("www.example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}},
		Answers: []layers.DNSResourceRecord{
			{Name: []byte("www.example.com"), Type: layers.DNSTypeCNAME, Class: layers.DNSClassIN, TTL: 60, CNAME: []byte("edge.example.net")},
			a("edge.example.net", "10.1.2.3"),
			a("edge.example.net", "198.51.100.7"),
			a("edge.example.net", "::ffff:127.0.0.1"),
		},
		Authorities: []layers.DNSResourceRecord{{Name: []byte("example.net"), Type: layers.DNSTypeSOA, Class: layers.DNSClassIN, TTL: 300,
			SOA: layers.DNSSOA{MName: []byte("ns.example.net"), RName: []byte("h.example.net"), Serial: 1, Refresh: 2, Retry: 3, Expire: 4, Minimum: 5}}},
		Additionals: []layers.DNSResourceRecord{
			{Name: []byte(""), Type: layers.DNSTypeOPT, Class: layers.DNSClass(1232)},
			a("ns.example.net", "192.168.0.53"),
		},
	}
	buf := gopacket.NewSerializeBuffer()
	if err := in.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	// a record gopacket cannot write (RRSIG), appended as raw bytes to the additional section
	raw := append(slices.Clone(buf.Bytes()), 0, 0, 46, 0, 1, 0, 0, 0, 30, 0, 4, 1, 2, 3, 4)
	raw[11]++ // ARCOUNT
	var ans layers.DNS
	if err := ans.DecodeFromBytes(raw, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	c := &Call{}
	var ev event.DNS
	withheld, note := c.withheld(&ans, nil, &ev)
	if strings.Join(ev.Internal, " ") != "10.1.2.3 127.0.0.1 192.168.0.53" {
		t.Errorf("the event's internal addresses: %v", ev.Internal)
	}
	if len(withheld) != 3 || note != "withheld 10.1.2.3 (private), 127.0.0.1 (loopback), 192.168.0.53 (private): internal addresses, and no rule for the name says allowPrivate" {
		t.Fatalf("withheld %v: %q", withheld, note)
	}
	out, err := rebuild(&ans, withheld, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got layers.DNS
	if err := got.DecodeFromBytes(out, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sec := range [][]layers.DNSResourceRecord{got.Answers, got.Authorities, got.Additionals} {
		for _, rr := range sec {
			s := rr.Type.String() + " " + string(rr.Name)
			if rr.IP != nil {
				s += " " + rr.IP.String()
			}
			names = append(names, s)
		}
	}
	want := []string{"CNAME www.example.com", "A edge.example.net 198.51.100.7", "SOA example.net", "OPT "}
	if !slices.Equal(names, want) || got.ID != 7 || !got.QR || got.ResponseCode != layers.DNSResponseCodeNoErr || len(got.Questions) != 1 {
		t.Errorf("rebuilt %q (id %d), want %q", names, got.ID, want)
	}
	if got.Additionals[0].Class != 1232 {
		t.Errorf("EDNS payload size %d, want 1232", got.Additionals[0].Class)
	}
}

// Written without compression, a reply can outgrow the sender's UDP limit: it goes
// truncated (TC, no records), and the sender asks again over TCP.
func TestRebuildTruncatesPastTheUDPLimit(t *testing.T) {
	q := layers.DNS{Questions: []layers.DNSQuestion{{Name: []byte("many.example.com"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}}
	ans := q
	ans.ID, ans.QR = 9, true
	for i := 0; i < 40; i++ {
		ans.Answers = append(ans.Answers, layers.DNSResourceRecord{Name: []byte("many.example.com"), Type: layers.DNSTypeA,
			Class: layers.DNSClassIN, TTL: 30, IP: net.IPv4(198, 51, 100, byte(i))})
	}
	withheld := map[netip.Addr]bool{netip.MustParseAddr("198.51.100.0"): true}
	for _, tc := range []struct {
		transport string
		edns      uint16
		truncated bool
	}{{"udp", 0, true}, {"udp", 4096, false}, {"tcp", 0, false}} {
		q := q
		if tc.edns > 0 {
			q.Additionals = []layers.DNSResourceRecord{{Type: layers.DNSTypeOPT, Class: layers.DNSClass(tc.edns)}}
		}
		out, err := rebuild(&ans, withheld, udpLimit(&q, tc.transport))
		if err != nil {
			t.Fatal(err)
		}
		var got layers.DNS
		if err := got.DecodeFromBytes(out, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if got.TC != tc.truncated || tc.truncated != (len(got.Answers) == 0) || !tc.truncated && len(got.Answers) != 39 || got.ID != 9 {
			t.Errorf("%s edns %d: TC %v, %d answers, %d bytes", tc.transport, tc.edns, got.TC, len(got.Answers), len(out))
		}
	}
}
